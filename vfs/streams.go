package vfs

import (
	"os"
	"time"
)

// Stream feeds (Config.SpliceStreams): the splicer's ranged GETs, one for
// each run of in-order direct-I/O reads elsewhere in an object than its
// start, served reply by reply as the whole-object GET is (splice.go). A
// loader's threads each read chunks of one file with large preads, which
// the kernel splits into reads of its largest size sent one after another:
// each such run is a stream, and a GET of its own spares the daemon the
// copy from the socket into blocks and out again.

// streamRange is the range of a stream feed's GET: that of the preads
// of the parallel loaders it is for (16-64 MiB, the largest taken), a
// multiple of every FUSE read size, so that a stream whose reads go on
// past it meets its end between two reads.
const streamRange = 64 << 20

// streamFeedIdle is how long a stream feed waits for its reader's next read
// before the next stream to start may end it: a stream's reads follow each
// other at once (the kernel sends a large pread's reads one by one), and a
// loader's thread that has read its chunk goes on elsewhere. A feed that
// has served one read waits firstReadIdle: its second read comes as soon
// as the first reply is in, and a reader at random leaves every feed there,
// with the server's sends into its socket unread.
const (
	streamFeedIdle = time.Second
	firstReadIdle  = 250 * time.Millisecond
)

// minStreamRead is the smallest read a stream feed starts at: the kernel's
// smallest split of a large read.
const minStreamRead = 1 << 20

// maxStreamFeeds bounds a handle's stream feeds, each a connection and a
// pipe: one per reading thread of the loaders they are for, with room.
const maxStreamFeeds = 32

// stream returns the stream feed whose reader reads at off next, or one
// started there for a read of n bytes: nil where the read does not look
// like a stream's first, a stream feed of the handle failed before, the blocks hold off's block already (no second
// GET of bytes they have or are fetching), another handle of the version
// reads, or the handle has maxStreamFeeds feeds that are all in use.
func (s *splicer) stream(off int64, n int) *spliceFeed {
	h := s.h
	s.mu.Lock()
	for _, feed := range s.streams {
		if feed.next.Load() == off && off < feed.end {
			s.mu.Unlock()
			return feed
		}
	}
	s.mu.Unlock()
	// A stream starts with a large read that the kernel split into reads
	// of its largest size, one after another: a smaller first read is a
	// whole one. Within a page of it: the first read into a buffer that
	// does not start on a page is short by the part of its first page.
	largest := h.f.largestRead.Load()
	for int64(n) > largest && !h.f.largestRead.CompareAndSwap(largest, int64(n)) {
		largest = h.f.largestRead.Load()
	}
	if n < minStreamRead || int64(n)+int64(os.Getpagesize()) <= largest || s.streamFailed.Load() {
		return nil
	}
	if h.f.fetch.missingRun(h.obj, off/int64(h.f.cfg.BlockSize), off/int64(h.f.cfg.BlockSize)+1) == 0 {
		return nil
	}
	if !h.st.tryStreams(h) {
		return nil
	}
	s.endStale()
	s.mu.Lock()
	full := len(s.streams) >= maxStreamFeeds
	s.mu.Unlock()
	if full {
		h.f.m.SpliceEnds.WithLabelValues(spliceRefused).Inc()
		return nil
	}
	fit := s.fit.Load()
	if fit == 0 {
		fit = streamRange
	}
	if off == s.doneAt.Load() {
		fit = min(2*fit, streamRange) // the stream read on: its range was short
		s.fit.Store(fit)
	}
	feed := h.openSplice(off, min(fit, h.obj.version.Size-off))
	if feed == nil {
		return nil
	}
	s.mu.Lock()
	s.streams = append(s.streams, feed)
	s.mu.Unlock()
	return feed
}

// endStale ends the feeds nobody will read on: those whose reader has
// read nothing for streamFeedIdle (firstReadIdle after one read), and
// those whose next bytes another feed has served already (the stream that
// read them started later, where this one's reader had not got to yet: a
// loader's threads read neighbouring chunks). A feed whose turn is taken
// is in use, and left.
func (s *splicer) endStale() {
	s.mu.Lock()
	all := append([]*spliceFeed(nil), s.streams...)
	s.mu.Unlock()
	if whole := s.feed.Load(); whole != nil {
		all = append(all, whole)
	}
	now := time.Now()
	idleSince, firstSince := now.Add(-streamFeedIdle).UnixNano(), now.Add(-firstReadIdle).UnixNano()
	for _, feed := range all {
		last := feed.lastRead.Load()
		next, stale := feed.next.Load(), last < idleSince || feed.replies.Load() <= 1 && last < firstSince
		for _, other := range all {
			if other != feed && other.start <= next && next < other.next.Load() {
				stale = true
			}
		}
		if !stale {
			continue
		}
		select {
		case feed.turn <- struct{}{}: // no read nor reply holds it
			s.h.endSplice(feed, spliceLeft, nil)
			s.give(feed)
		default:
		}
	}
}

// forget drops a feed whose reply was not written: the handle's next
// reads do not look for it, and the blocks serve the reader from off.
func (s *splicer) forget(feed *spliceFeed, off int64) {
	if !feed.ranged {
		s.feed.CompareAndSwap(feed, nil)
		s.h.st.spliceEnded(s.h, off, true)
		return
	}
	s.drop(feed)
}

// drop takes a stream feed out of the handle's streams.
func (s *splicer) drop(feed *spliceFeed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.streams {
		if f == feed {
			s.streams = append(s.streams[:i], s.streams[i+1:]...)
			return
		}
	}
}

// streamEnded accounts for a stream feed that ended and forgets it: one
// left before its range's end had served what the handle's next feed is
// sized to (the chunk a loader's thread reads before another takes over),
// and where one read to its end ended is where a reader that reads on
// shows its range was short. After a failed one the handle starts no more.
func (s *splicer) streamEnded(feed *spliceFeed, why string) {
	served := feed.next.Load() - feed.start
	switch {
	case why == spliceLeft && served > 0 && served < feed.end-feed.start:
		s.fit.Store(served)
	case why == spliceDone:
		s.doneAt.Store(feed.end)
	case why == spliceError:
		s.streamFailed.Store(true)
	}
	s.drop(feed)
}
