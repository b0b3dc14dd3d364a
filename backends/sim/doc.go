// Package sim is the "sim" backend: it runs simulated model servers (package
// simserver, in sim/server) as separate OS processes and implements
// plugins.Backend for them, so tests and benchmarks exercise real processes,
// ports and streams where no real model server can run.
//
// The process machinery (process groups, readiness, stop, orphan safety) is
// the cmd backend's; this package adds the translation of a model's options
// into a sim-server command line, an exact Estimate, and the measured VRAM
// the server reports. It touches no GPU.
//
// Readiness is the cmd backend's rule (see cmdbackend): the port the host
// gives the server must be free when it is launched, /health must answer
// 200 from a listener of the server's own process group (the sim server
// binds the port itself), and a server that exits while starting fails the
// start with its exit error whatever answers on the port.
package sim
