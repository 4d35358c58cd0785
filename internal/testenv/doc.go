// Package testenv gives tests and benchmarks a real S3 server to talk to.
//
// It runs versitygw (a standalone S3 gateway) over a throwaway posix
// directory on a loopback port, so code under test speaks genuine S3 over
// HTTP instead of a mock. The binary is installed by `make deps`.
package testenv
