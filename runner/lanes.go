package runner

func init() {
	RegisterLane(NewQMVLane())
	RegisterLane(NewQMVPathsLane())
	RegisterLane(NewSnapshotLane())
	RegisterLane(NewFootprintLane())
	RegisterLane(NewThroughputLane())
}
