// Package logbuf is a bounded, asynchronously flushed io.Writer for log
// lines: the server's access log writes through it so that a request
// never waits on the log's sink (a terminal, a pipe to a slow collector).
package logbuf
