package objstore

import (
	"context"
	"errors"
	"testing"
	"time"
)

// spinner answers every read with nothing and no error, forever.
type spinner struct{}

func (spinner) Read([]byte) (int, error) { return 0, nil }

func TestStallGuardEndsABodyThatReturnsNothingForever(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := StallGuard{Timeout: 20 * time.Millisecond}
	g.Start(cancel)
	defer g.Stop()
	done := make(chan error, 1)
	go func() { done <- g.ReadFull(ctx, spinner{}, make([]byte, 10)) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v, want a timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadFull spins on a body that returns (0, nil)")
	}
}

func TestStallGuardErrTellsAStallFromACallerCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	g := StallGuard{Timeout: time.Hour}
	g.Start(cancel)
	cancel() // the caller gave up: not a stall
	g.Stop()
	if err := g.Err(context.Canceled); !errors.Is(err, context.Canceled) || IsRetryable(err) {
		t.Fatalf("caller cancel: %v", err)
	}
	_ = ctx
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	g = StallGuard{Timeout: time.Millisecond}
	g.Start(cancel)
	<-ctx.Done()
	if err := g.Err(ctx.Err()); !errors.Is(err, context.DeadlineExceeded) || !IsRetryable(err) {
		t.Fatalf("stall: %v, want a retryable timeout", err)
	}
	if err := g.Err(nil); err != nil {
		t.Fatalf("Err(nil) = %v", err)
	}
}
