package cpu_test
