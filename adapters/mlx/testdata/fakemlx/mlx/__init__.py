"""A stand-in for the mlx package, for testing the MLX adapter on CPU."""
