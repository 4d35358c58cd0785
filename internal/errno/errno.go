// Package errno lets an error carry the errno a file operation answers it
// with, from where the error is made: a store's "not found" is ENOENT
// wherever it travels, wrapped or not. The FUSE layer turns errors into
// answers in one place (fs/errno.go) by reading the errno back.
package errno

import (
	"errors"
	"syscall"
)

// New is a sentinel error with the text and the errno it is answered with.
func New(code syscall.Errno, text string) error { return &sentinel{text: text, code: code} }

type sentinel struct {
	text string
	code syscall.Errno
}

func (e *sentinel) Error() string        { return e.text }
func (e *sentinel) Errno() syscall.Errno { return e.code }

// With gives err the errno code, keeping its text and its chain
// (errors.Is and errors.As see through it).
func With(code syscall.Errno, err error) error { return &withErrno{err: err, code: code} }

type withErrno struct {
	err  error
	code syscall.Errno
}

func (e *withErrno) Error() string        { return e.err.Error() }
func (e *withErrno) Unwrap() error        { return e.err }
func (e *withErrno) Errno() syscall.Errno { return e.code }

// Of is the errno err carries, the outermost one in its chain; ok is false
// when it carries none.
func Of(err error) (code syscall.Errno, ok bool) {
	var c interface{ Errno() syscall.Errno }
	if errors.As(err, &c) {
		return c.Errno(), true
	}
	return 0, false
}
