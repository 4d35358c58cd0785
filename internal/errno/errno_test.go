package errno

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// An errno travels with its error through wrapping, the outermost one
// wins, and an error without one says so.
func TestErrnoTravelsWithTheError(t *testing.T) {
	notFound := New(syscall.ENOENT, "object not found")
	wrapped := fmt.Errorf("get b/k: %w", notFound)
	if code, ok := Of(wrapped); !ok || code != syscall.ENOENT || !errors.Is(wrapped, notFound) {
		t.Errorf("wrapped sentinel: %v %v", code, ok)
	}
	if wrapped.Error() != "get b/k: object not found" {
		t.Errorf("text %q", wrapped.Error())
	}
	over := With(syscall.EIO, wrapped)
	if code, _ := Of(over); code != syscall.EIO || !errors.Is(over, notFound) || over.Error() != wrapped.Error() {
		t.Errorf("With: %v, %q", code, over.Error())
	}
	if _, ok := Of(errors.New("plain")); ok {
		t.Error("a plain error carries an errno")
	}
	if _, ok := Of(fmt.Errorf("conn: %w", syscall.ECONNRESET)); ok {
		t.Error("a bare errno deeper in the chain counts as carried")
	}
}
