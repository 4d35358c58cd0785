package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// StallGuard cancels a request when its body makes no progress for
// Timeout: a stalled server would otherwise hang every reader waiting on it.
type StallGuard struct {
	Timeout time.Duration
	timer   *time.Timer
	fired   atomic.Bool
}

// Start arms the guard for a request whose context cancel ends it. A guard
// without a Timeout never fires.
func (g *StallGuard) Start(cancel context.CancelFunc) {
	if g.Timeout <= 0 {
		return
	}
	g.timer = time.AfterFunc(g.Timeout, func() {
		g.fired.Store(true)
		cancel()
	})
}

// Err turns the cancellation the guard caused into a timeout, which
// IsRetryable accepts: a server that never answered is worth asking again,
// unlike a caller that gave up. Other errors pass unchanged.
func (g *StallGuard) Err(err error) error {
	if err != nil && g.fired.Load() && errors.Is(err, context.Canceled) {
		return g.stalled()
	}
	return err
}

func (g *StallGuard) stalled() error {
	return fmt.Errorf("no data for %s: %w", g.Timeout, context.DeadlineExceeded)
}

// Touch re-arms the guard: the reader paused on purpose (waiting for
// somewhere to put the bytes), not the server.
func (g *StallGuard) Touch() {
	if g.timer != nil {
		g.timer.Reset(g.Timeout)
	}
}

// Stop disarms it.
func (g *StallGuard) Stop() {
	if g.timer != nil {
		g.timer.Stop()
	}
}

// ReadFull is io.ReadFull that re-arms the guard after every read that
// brought bytes. A body that ends early gives io.ErrUnexpectedEOF; one that
// was cancelled by the guard gives context.DeadlineExceeded, one whose
// caller gave up gives ctx's error. A body that keeps answering with no
// bytes and no error is ended by the guard too.
func (g *StallGuard) ReadFull(ctx context.Context, r io.Reader, p []byte) error {
	n := 0
	for n < len(p) {
		m, err := r.Read(p[n:])
		n += m
		if m > 0 {
			g.Touch()
		}
		if n == len(p) {
			return nil
		}
		if err != nil || m == 0 {
			if ctx.Err() != nil {
				if g.fired.Load() {
					return g.stalled()
				}
				return ctx.Err()
			}
			if err == nil {
				continue
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// ErrLongBody means a response carried more bytes than the range asked
// for: the server (or something between) did not honour the range, so the
// reply is not trusted. It is retryable.
var ErrLongBody = errors.New("response body longer than the range asked for")

// CheckEnd confirms that a body whose expected bytes were all read has
// nothing more: a read path calls it before it trusts the last of them.
func CheckEnd(r io.Reader) error {
	var b [1]byte
	for range 3 {
		n, err := r.Read(b[:])
		if n > 0 {
			return ErrLongBody
		}
		if err != nil {
			// EOF, or a connection that broke after the last byte: every
			// byte asked for is in either way.
			return nil
		}
	}
	return nil
}

// Backoff is the pause before retry number attempt (1, 2, ...): 50 ms,
// 200 ms, 800 ms, then 3.2 s, so a few retries stay within seconds.
func Backoff(attempt int) time.Duration {
	if attempt > 4 {
		attempt = 4
	}
	return time.Duration(50<<(2*(attempt-1))) * time.Millisecond
}
