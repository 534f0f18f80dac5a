// Package cputime reads the process's CPU time, so benchmarks can report
// CPU per item next to wall-clock throughput (on a shared 2-core machine
// the CPU figure is the steadier of the two).
package cputime
