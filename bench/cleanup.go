package main

import "sync"

// cleanupStack runs registered cleanups last-in first-out, each at most
// once, whether the run ends normally, fails, or is interrupted.
type cleanupStack struct {
	mu    sync.Mutex
	funcs []func()
}

func (c *cleanupStack) push(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.funcs = append(c.funcs, f)
}

func (c *cleanupStack) run() {
	for {
		c.mu.Lock()
		if len(c.funcs) == 0 {
			c.mu.Unlock()
			return
		}
		f := c.funcs[len(c.funcs)-1]
		c.funcs = c.funcs[:len(c.funcs)-1]
		c.mu.Unlock()
		f()
	}
}

// once wraps f so that calling it directly and from the stack is safe.
func once(f func()) func() {
	var o sync.Once
	return func() { o.Do(f) }
}
