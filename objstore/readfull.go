package objstore

import (
	"context"
	"fmt"
	"io"
	"time"
)

// StallGuard cancels a request when its body makes no progress for
// Timeout: a stalled server would otherwise hang every reader waiting on it.
type StallGuard struct {
	Timeout time.Duration
	timer   *time.Timer
}

// Start arms the guard for a request whose context cancel ends it.
func (g *StallGuard) Start(cancel context.CancelFunc) { g.timer = time.AfterFunc(g.Timeout, cancel) }

// Stop disarms it.
func (g *StallGuard) Stop() { g.timer.Stop() }

// ReadFull is io.ReadFull that re-arms the guard after every read that
// brought bytes. A body that ends early gives io.ErrUnexpectedEOF; one that
// was cancelled by the guard gives context.DeadlineExceeded.
func (g *StallGuard) ReadFull(ctx context.Context, r io.Reader, p []byte) error {
	n := 0
	for n < len(p) {
		m, err := r.Read(p[n:])
		n += m
		if m > 0 {
			g.timer.Reset(g.Timeout)
		}
		if n == len(p) {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("no data for %s: %w", g.Timeout, context.DeadlineExceeded)
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// Backoff is the pause before retry number attempt (1, 2, ...): 50 ms,
// 200 ms, 800 ms, then 1.6 s, so a few retries stay within seconds.
func Backoff(attempt int) time.Duration {
	if attempt > 4 {
		attempt = 4
	}
	return time.Duration(50<<(2*(attempt-1))) * time.Millisecond
}
