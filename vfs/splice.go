package vfs

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// Splicing (--splice) serves a direct-I/O reader that reads an object from
// its start without the daemon ever touching the bytes: one GET of the whole
// object on a connection of its own, and each read request's bytes spliced
// from that socket into a pipe, from which the FUSE layer splices them into
// the kernel's reply. The kernel then copies each byte once, from the
// socket's pages into the reader's buffer, where the ordinary path copies it
// twice (socket to block, block to reader) and spends the daemon's CPU on
// the first: on two cores that copy is what held the mount below raw GETs
// (docs/benchmarks.md, "Defaults and why").
//
// What it gives up, and so when it is used: the bytes are in no block, so a
// second reader of the object cannot share them and they do not enter the
// block cache. A handle splices only when it starts at offset 0 while no
// other handle of the same version is reading; it stops at the first read
// anywhere but where the GET has got to (the reader seeks, or two threads
// read one descriptor), when the GET fails (ordinary reads take over from
// there, with their retries), and at close. Its socket buffer is its read
// ahead: the server is held back by TCP, and no block memory is used.
//
// With Config.SpliceAhead the next reply's bytes leave the socket while
// this reply is written: a goroutine splices them into a second pipe as the
// FUSE layer writes the reply out of the first (on another CPU), and the two
// pipes change places once the reply is written. On 16 cores that took the
// splice out of the reader's chain of each request (docs/benchmarks.md,
// "Defaults and why"):
// spliced after the reply, as the reader woke, it was still running when
// the next read came. Where a second pipe cannot be had (the user's pipe
// allowance), or the pipe holds more than this reply, the feed splices what
// the socket already holds of the next reply into its one pipe after the
// reply instead. Such a feed asks for a larger socket receive buffer
// (objstore.Config.RawReceiveBuffer), so that the server can be a reply
// ahead of it.
type spliceFeed struct {
	// turn is a single slot: who holds it owns the GET's socket and the
	// pipes. A read takes it (take) and gives it back before it returns,
	// except with a reply that waits in the pipe: that reply holds it
	// until go-fuse has written it and calls its Done, which gives it
	// back once the next reply's bytes are spliced in. A read or close
	// that waits for it longer than Config.ReadTimeout while a reply holds
	// it (a reply never written) gives the feed up (abandoned) rather than
	// wait on: the reader's place goes to the blocks at once, and whoever
	// holds the turn ends the feed as it gives the turn back. A read that
	// holds it is waited for: its GET's own timeouts bound it. No mutex is
	// held across the return to the FUSE layer.
	turn chan struct{}
	// outSince is when the reply that holds the turn went out (Unix
	// nanoseconds); 0 while no reply holds it.
	outSince atomic.Int64
	// abandoned: the feed is to end as soon as its turn is free.
	abandoned atomic.Bool
	ended     atomic.Bool    // endSplice ran: no read is waited for any more
	get       *objstore.Body // the GET (Close ends it)
	// start and end are the GET's range of the object; ranged: a stream
	// feed (end may be short of the object's end), not the whole-object
	// GET.
	start, end int64
	ranged     bool
	// next is the offset of the read the feed expects, set as each reply
	// goes out (before its Done: the reader's next read may come first),
	// for finding a stream's feed without taking its turn; lastRead is
	// when the last reply was written (Unix nanoseconds).
	next, lastRead atomic.Int64
	replies        atomic.Int32      // replies served
	body           *objstore.RawBody // its socket; nil once ended
	pr, pw         int               // the pipe: read end for the reply, write end for the socket
	size           int               // the pipe's capacity now (replyPipeSize of the reply)
	pos            int64             // next byte of the object the socket brings
	// inPipe is how many bytes wait in the pipe: those of the object
	// from pos-inPipe on, for the next read.
	inPipe int
	// copying counts replies still to copy without trying the pipe: the
	// socket's last reply came in buffers too small for it.
	copying int

	// spare is the second pipe (Config.SpliceAhead): the next reply's
	// bytes are spliced into it while the FUSE layer writes this one out
	// of the first, and the two change places once the reply is written.
	spare replyPipe
	// beside, while not nil, is the splice into spare under way; the
	// goroutine that runs it owns body and spare until Done joins it.
	beside chan besideFill
	// besideErr is the error a fill beside a reply met, for the next read.
	besideErr error
	// noSpare is set once the spare pipe could not be made or sized: the
	// feed then fills its one pipe after each reply.
	noSpare bool

	// moved, while not nil, is closed when next moves or the feed ends:
	// what a page-cache read that came ahead of its turn waits on
	// (awaitReader).
	movedMu sync.Mutex
	moved   chan struct{}
}

// replyPipe is a pipe's two ends and its capacity now (size 0: not made
// yet).
type replyPipe struct{ pr, pw, size int }

// besideFill is what a splice into the spare pipe moved, and how it ended.
type besideFill struct {
	moved, waits int
	err          error
}

// Why a spliced GET ended: the values of s3gdsfs_splice_ends_total's label.
const (
	spliceDone    = "done"    // the reader got to the end of the object
	spliceLeft    = "left"    // it closed the file or read elsewhere first, or a reply out was given up
	spliceError   = "error"   // the GET failed while reading; ordinary reads take over
	spliceShared  = "shared"  // another reader of the object came; ordinary reads, which share blocks, take over
	spliceRefused = "refused" // it could not start; ordinary reads serve
)

// splicer is the reader that serves a direct-I/O open (a handle's first
// reader, where the mount splices) from spliced GETs: the reply is the
// read's n bytes waiting in a pipe, for the FUSE layer to splice on, or
// copied out of the socket where its bytes came in buffers too small for
// one reply's pipe. It takes a read at offset 0 while no other handle of
// the version reads (readState.trySplice) with one GET of the whole
// object, and the reads that follow it. With Config.SpliceStreams it also
// takes each other stream of reads that starts where the blocks hold
// nothing, while no other handle of the version reads
// (readState.tryStreams), with a ranged GET of its own (a stream feed):
// many threads' preads of one file, each a run of reads in order, are
// served as one reader's whole-object GET is. A page-cache read elsewhere
// than the whole-object GET stands is read aside from the blocks while the
// GET waits for its reader (readAside). Any other read, and every read of
// a stream once its GET has ended early, falls back to the blocks; the
// whole-object GET hands them the handle's place (readState.spliceEnded).
type splicer struct {
	h    *Handle
	feed atomic.Pointer[spliceFeed] // the whole-object GET; nil before and after it
	// opening is set as the read at 0 opens the whole-object GET, and
	// first is closed once it has its feed or was refused one: page-cache
	// reads sent with it that reach the daemon first wait on it
	// (awaitFirst).
	opening   atomic.Bool
	first     chan struct{}
	firstOnce sync.Once
	// mu guards streams, the stream feeds under way (Config.SpliceStreams),
	// and the reads aside.
	mu      sync.Mutex
	streams []*spliceFeed
	// The reads aside (readAside): the run of them that continue one
	// another, [asideFrom, asideTo); how many came since the whole-object
	// GET stood at asideAt; and where each recent one ended, by where it
	// started (asideEnds), for the GET to step over once its reader passes
	// them.
	asideFrom, asideTo, asideAt int64
	asideReads                  int
	asideEnds                   map[int64]int64
	// fit is the range of the handle's next stream feed: streamRange at
	// first, then what the last stream left early had served (a loader's
	// chunk), doubled (up to streamRange) when a stream reads on past
	// its feed's end; doneAt is where the last feed that was read to its
	// end ended.
	fit, doneAt atomic.Int64
	// streamFailed: a stream feed's GET failed in its body; the handle's
	// streams are left to the blocks, whose GETs are retried.
	streamFailed atomic.Bool
}

// read serves [off, off+n) from one of the handle's spliced GETs, starting
// one where it may; the reply is n bytes, fewer only at the end of the
// object.
func (s *splicer) read(ctx context.Context, off int64, n int, cached bool) (Reply, error) {
	h := s.h
	size := h.obj.version.Size
	streams := h.f.cfg.SpliceStreams
	if feed := s.feed.Load(); feed != nil {
		// With stream feeds a direct read elsewhere is another stream's,
		// and the whole-object GET waits for its own reader; without them
		// it ends there. A page-cache read a little ahead waits for its
		// turn (the kernel's readahead comes out of order) or steps over
		// what its reader passed; one elsewhere is read aside while the
		// GET waits for its reader, unless that reader went elsewhere.
		if !streams || cached || feed.next.Load() == off {
			var skip int64
			if cached {
				reach, next := s.reorderReach(n), feed.next.Load()
				switch {
				case off < next || off-next > reach:
					if rep, aside, err := s.readAside(ctx, feed, off, n, reach); aside {
						return rep, err
					}
				case off > next:
					if !s.passedAside(next, off) {
						feed.awaitReader(ctx, off, reach, h.f.cfg.ReadTimeout, h.f.m.SpliceReorderWaits)
					}
					skip = reach
					rep, err := s.serve(ctx, feed, off, n, skip)
					if err != errBehind {
						return rep, err
					}
					// A read after it stepped over it first: it is behind now.
					if rep, aside, err := s.readAside(ctx, feed, off, n, reach); aside {
						return rep, err
					}
					skip = 0
				}
			}
			return s.serve(ctx, feed, off, n, skip)
		}
	} else if off == 0 && n > 0 && size > 0 && h.st.trySplice(h) {
		s.opening.Store(true)
		feed := h.openSplice(0, size)
		if feed == nil {
			h.st.spliceEnded(h, 0, false)
			s.opened()
			return Reply{}, errFallBack
		}
		// No read comes after the release that closes the handle, so
		// close will find the feed set here.
		s.feed.Store(feed)
		s.opened()
		return s.serve(ctx, feed, off, n, 0)
	} else if cached && off > 0 && off <= s.reorderReach(n) && s.awaitFirst(h) {
		// A read the kernel sent with the first: the feed serves it in
		// its turn.
		if feed := s.feed.Load(); feed != nil {
			feed.awaitReader(ctx, off, s.reorderReach(n), h.f.cfg.ReadTimeout, h.f.m.SpliceReorderWaits)
			return s.serve(ctx, feed, off, n, 0)
		}
	}
	// The page cache's reads come in the kernel's order, not a stream's.
	if !streams || cached || n <= 0 || off >= size {
		return Reply{}, errFallBack
	}
	// A feed found as it ended (its last reply was being written) is
	// looked for again: the stream goes on with a feed of its own.
	for range 2 {
		feed := s.stream(off, n)
		if feed == nil {
			break
		}
		if rep, err := s.serve(ctx, feed, off, n, 0); err != errFeedEnded {
			return rep, err
		}
	}
	return Reply{}, errFallBack
}

// opened says the read at 0 has opened its whole-object GET or will not.
func (s *splicer) opened() { s.firstOnce.Do(func() { close(s.first) }) }

// awaitFirst waits for the whole-object GET of a handle whose read at 0
// is opening it or has yet to come: the kernel sends a mapping's first
// reads together, and the later ones may reach the daemon first. It waits
// reorderWait for the read at 0, and while that read opens the GET (up to
// the mount's read timeout, which bounds the GET too). It reports whether
// the wait ended with the GET decided (its feed then in s.feed, or none).
func (s *splicer) awaitFirst(h *Handle) bool {
	if !s.opening.Load() && !h.st.spliceUntried(h) {
		return false
	}
	h.f.m.SpliceReorderWaits.Inc()
	t := time.NewTimer(reorderWait)
	defer t.Stop()
	deadline := time.Now().Add(h.f.cfg.ReadTimeout)
	for {
		select {
		case <-s.first:
			return true
		case <-t.C:
			if !s.opening.Load() || time.Now().After(deadline) {
				return false
			}
			t.Reset(reorderWait)
		}
	}
}

// maxAsideReads bounds the reads aside that may come while the
// whole-object GET stands still: past it the reader has gone elsewhere.
const maxAsideReads = 4096

// readAside serves a page-cache read of n bytes at off, elsewhere than the
// whole-object GET stands (behind it, or more than reach ahead), from the
// blocks, and leaves the GET for its reader to come back to: a mapping's
// reader that touches each tensor's first page before it reads them in
// order (safetensors' load_file onto the CPU) comes back. It reports
// false, and serves nothing, where the reader has gone elsewhere instead:
// its reads aside continue one another past reach (a reader in order
// there, forward or backward), or more than maxAsideReads came while the
// GET stood still.
func (s *splicer) readAside(ctx context.Context, feed *spliceFeed, off int64, n int, reach int64) (rep Reply, aside bool, err error) {
	h := s.h
	end := min(off+int64(n), h.obj.version.Size)
	if off >= end {
		return Reply{}, false, nil
	}
	s.mu.Lock()
	if next := feed.next.Load(); next != s.asideAt {
		s.asideReads, s.asideAt = 0, next
	}
	switch run := s.asideTo > s.asideFrom; {
	case run && off == s.asideTo: // on in order
		s.asideTo = end
	case run && end == s.asideFrom: // on backward (the blocks feed such a reader too)
		s.asideFrom = off
	default:
		s.asideFrom, s.asideTo = off, end
	}
	s.asideReads++
	elsewhere := s.asideTo-s.asideFrom > reach || s.asideReads > maxAsideReads
	if !elsewhere {
		if len(s.asideEnds) >= maxAsideReads {
			clear(s.asideEnds)
		}
		if s.asideEnds == nil {
			s.asideEnds = make(map[int64]int64)
		}
		s.asideEnds[off] = end
	}
	s.mu.Unlock()
	if elsewhere {
		return Reply{}, false, nil
	}
	// One GET for the blocks the read spans that nobody has.
	bs := int64(h.f.cfg.BlockSize)
	h.f.fetch.prefetch(h.obj, off/bs, (end+bs-1)/bs)
	views, held, err := h.blockViews(ctx, off, end)
	if err != nil {
		return Reply{}, true, err
	}
	h.f.m.SpliceAsideReads.Inc()
	h.f.m.PosixReadBytes.Add(float64(end - off))
	return Reply{Views: views, Release: func() { releaseBlocks(held) }}, true, nil
}

// passedAside says whether reads aside served all of [from, to): the
// page cache holds it, and the reader at to will not ask for it.
func (s *splicer) passedAside(from, to int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for from < to {
		end, ok := s.asideEnds[from]
		if !ok || end <= from {
			return false
		}
		from = end
	}
	return true
}

// errBehind is serve's answer for a page-cache read that came ahead of
// the feed and found it past when it got its turn: a read after it stepped
// over it first.
var errBehind = errors.New("vfs: the whole-object GET passed the read")

// errFeedEnded is serve's answer for a stream feed that had ended when the
// read got its turn.
var errFeedEnded = errors.New("vfs: the stream feed ended")

// serve serves [off, off+n) from feed, the GET whose reader reads at off,
// or up to skip bytes short of it (the GET passes over them unread);
// errFallBack (errFeedEnded for a stream feed that had ended) where the
// blocks are to.
func (s *splicer) serve(ctx context.Context, feed *spliceFeed, off int64, n int, skip int64) (Reply, error) {
	h := s.h
	size := h.obj.version.Size
	// Wait for the reply before: the kernel may send the next request
	// before go-fuse has said it is done with the last.
	if ok, err := feed.take(ctx, h.f.cfg.ReadTimeout); err != nil {
		return Reply{}, err
	} else if !ok {
		// The reply before was not written: the blocks serve on from
		// here, and its Done, if it ever comes, ends the GET.
		s.forget(feed, off)
		s.abandon(feed, fmt.Errorf("the reply before was not written within %v", h.f.cfg.ReadTimeout))
		return Reply{}, errFallBack
	}
	if feed.body == nil || feed.abandoned.Load() {
		s.give(feed) // which ends an abandoned feed
		if feed.ranged {
			return Reply{}, errFeedEnded
		}
		return Reply{}, errFallBack
	}
	if h.st.spliceShared(h, feed.ranged) {
		h.endSplice(feed, spliceShared, nil)
		s.give(feed)
		return Reply{}, errFallBack
	}
	// Every reply leaves the pipe whole, so the pipe holds just what the
	// feed put there for this read; more are bytes of a reply that was not
	// delivered (its request was interrupted), and the reader asks for
	// them again: ordinary reads serve from there.
	inPipe, err := unix.IoctlGetInt(feed.pr, unix.TIOCINQ)
	if skip > 0 && off < feed.readerAt() {
		s.give(feed)
		return Reply{}, errBehind
	}
	if gap := off - feed.readerAt(); err == nil && inPipe == feed.inPipe && gap > 0 && gap <= skip && off < feed.end {
		// The reader stepped over pages the page cache has: pass them.
		if err := feed.discard(gap); err != nil {
			feed.rewind(off)
			h.spliceFailed(feed, err)
			s.give(feed)
			return Reply{}, errFallBack
		}
		h.f.m.SpliceSkippedBytes.Add(float64(gap))
		feed.served(off)
		inPipe = feed.inPipe
	}
	if err != nil || inPipe != feed.inPipe || off != feed.readerAt() || off >= size || off+int64(min(int64(n), size-off)) > feed.end {
		if err == nil && inPipe != feed.inPipe {
			err = fmt.Errorf("%d bytes in the pipe, %d put there", inPipe, feed.inPipe)
		}
		h.endSplice(feed, spliceLeft, err)
		s.give(feed)
		return Reply{}, errFallBack
	}
	want := int(min(int64(n), size-off))
	if err := feed.besideErr; err != nil {
		feed.rewind(off)
		h.spliceFailed(feed, err)
		s.give(feed)
		return Reply{}, errFallBack
	}
	tried := feed.copying == 0
	if !tried {
		feed.copying--
	} else if feed.inPipe < want {
		if err = feed.fill(want, h.f.m.SpliceSocketWaits); err != nil {
			feed.rewind(off) // the reader's place: what reached the pipe goes with it
			h.spliceFailed(feed, err)
			s.give(feed)
			return Reply{}, errFallBack
		}
	}
	if tried && feed.inPipe >= want && objstore.PipeHasRoom(feed.pw) {
		if h.f.cfg.SpliceAhead && feed.inPipe == want {
			feed.fillBeside(int(min(int64(want), feed.body.Left())))
		}
		// The reply keeps the turn: its Done gives it back.
		feed.outSince.Store(time.Now().UnixNano())
		feed.served(off + int64(want))
		return Reply{Pipe: &PipeReply{FD: feed.pr, N: want, Done: func() (taken int) {
			feed.outSince.Store(0)
			defer s.give(feed)
			return s.replyDone(feed, off, want)
		}}}, nil
	}
	// The pipe filled before it held the reply, or without a buffer to
	// spare: the socket brought small buffers (packets of a 1500-byte
	// frame network, not pages), more than go-fuse's pipe behind the reply
	// header could take, and it would send what fits and drop the rest.
	// Copy this reply instead, the rest of it straight from the socket,
	// and the next few straight from the socket too (trying the pipe
	// costs a splice whose bytes are then copied anyway).
	if tried {
		feed.copying = copyRun
	}
	data, err := feed.copyOut(want)
	if err != nil {
		feed.rewind(off)
		h.spliceFailed(feed, err)
		s.give(feed)
		return Reply{}, errFallBack
	}
	h.f.m.SpliceSmallBuffers.Add(float64(want))
	h.f.m.PosixReadBytes.Add(float64(want))
	feed.served(off + int64(want))
	if off+int64(want) == feed.end {
		h.endSplice(feed, spliceDone, nil)
	}
	s.give(feed)
	return Reply{Data: data}, nil
}

// replyDone accounts for a reply of want bytes at off once go-fuse has
// written it, and readies the pipe for the next read: the bytes spliced
// beside it, or those the socket holds already. It returns how many bytes
// left the pipe. Called with the feed's turn, which the reply held.
func (s *splicer) replyDone(feed *spliceFeed, off int64, want int) (taken int) {
	h := s.h
	feed.lastRead.Store(time.Now().UnixNano())
	beside, besideOK := feed.joinBeside(h.f.m.SpliceSocketWaits)
	left, err := unix.IoctlGetInt(feed.pr, unix.TIOCINQ)
	if err == nil {
		taken = feed.inPipe - left
		h.f.m.SpliceBytes.Add(float64(taken))
		h.f.m.PosixReadBytes.Add(float64(taken))
	}
	switch {
	case err != nil:
		feed.rewind(off)
		h.endSplice(feed, spliceError, fmt.Errorf("pipe after a reply: %w", err))
	case taken != want:
		feed.rewind(off + int64(taken)) // where the reader is
		h.endSplice(feed, spliceError, fmt.Errorf("reply of %d bytes taken in part (%d)", want, taken))
	case off+int64(want) == feed.end:
		h.endSplice(feed, spliceDone, nil)
	case feed.abandoned.Load():
		// Given up while the reply was out: it ends as the turn comes back.
	case besideOK:
		// The pipe just emptied; the spare holds the next reply.
		feed.pr, feed.pw, feed.size, feed.spare = feed.spare.pr, feed.spare.pw, feed.spare.size,
			replyPipe{feed.pr, feed.pw, feed.size}
		feed.pos += int64(beside.moved)
		feed.inPipe = beside.moved
		feed.besideErr = beside.err
		h.f.m.SpliceAhead.Add(float64(beside.moved))
	default:
		feed.inPipe = left
		if h.f.cfg.SpliceAhead {
			h.f.m.SpliceAhead.Add(float64(feed.fillAhead(want)))
		}
	}
	return taken
}

// take waits for the feed's turn (spliceFeed.turn): for as long as a read
// holds it, and up to wait once a reply out of vfs holds it; false when
// that reply was not written within wait, and ctx's error when the caller
// gave up first.
func (feed *spliceFeed) take(ctx context.Context, wait time.Duration) (bool, error) {
	select {
	case feed.turn <- struct{}{}:
		return true, nil
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case feed.turn <- struct{}{}:
			return true, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
		}
		since := feed.outSince.Load()
		if since == 0 {
			t.Reset(wait) // a read holds it
			continue
		}
		if left := wait - time.Since(time.Unix(0, since)); left > 0 {
			t.Reset(left)
			continue
		}
		return false, nil
	}
}

// give gives the feed's turn back, ending the feed first where it was
// given up meanwhile (abandon).
func (s *splicer) give(feed *spliceFeed) {
	<-feed.turn
	if feed.abandoned.Load() {
		s.endAbandoned(feed, nil)
	}
}

// abandon gives the feed up: it ends here if its turn is free, and
// otherwise when its holder gives the turn back. One of the two sees the
// other: abandoned is set before the turn is tried, and give looks at it
// after the turn is back.
func (s *splicer) abandon(feed *spliceFeed, err error) {
	feed.abandoned.Store(true)
	s.endAbandoned(feed, err)
}

// endAbandoned ends an abandoned feed if its turn is free.
func (s *splicer) endAbandoned(feed *spliceFeed, err error) {
	select {
	case feed.turn <- struct{}{}:
		s.h.endSplice(feed, spliceLeft, err)
		<-feed.turn
	default:
	}
}

// copyRun is how many replies after one of small buffers are copied
// without trying the pipe: the socket is tried again every 16 MiB of 1 MiB
// reads.
const copyRun = 15

// served records a reply that leaves the reader at next.
func (feed *spliceFeed) served(next int64) {
	if next != feed.start {
		feed.replies.Add(1)
	}
	feed.next.Store(next)
	feed.lastRead.Store(time.Now().UnixNano())
	feed.wake()
}

// wake tells the reads waiting in awaitReader that next moved or the feed
// ended.
func (feed *spliceFeed) wake() {
	feed.movedMu.Lock()
	if feed.moved != nil {
		close(feed.moved)
		feed.moved = nil
	}
	feed.movedMu.Unlock()
}

// reorderWindow is how many reads' worth ahead of the feed a page-cache
// read may come and still wait for its turn, at the least; reorderWait is
// how long it waits for the feed to move (the reads before it to be
// served).
const reorderWindow = 4

var reorderWait = 5 * time.Millisecond // a variable for tests on loaded machines

// reorderReach is how far ahead of the feed a page-cache read of n bytes
// may come and still wait for its turn: reorderWindow reads, or two of the
// kernel's readahead windows (the one being read and the one it sends
// ahead as the reader reaches its mark), whichever is more.
func (s *splicer) reorderReach(n int) int64 {
	return max(reorderWindow*int64(n), 2*s.h.f.cfg.KernelReadAhead)
}

// awaitReader waits, briefly, for the feed to reach off when a page-cache
// read at off came ahead of it, by no more than reach. The kernel's readahead sends a
// reader's next requests together, and they reach the daemon in either
// order; served as they come, the one that overtook would end the
// whole-object GET, and the blocks would serve the rest of the file. It
// waits while the feed moves or a read holds its turn (with a large
// readahead the reads before it may take longer than reorderWait all
// told), up to wait (the mount's read timeout). A read the feed stops
// short of, idle, for reorderWait (the reader went elsewhere) is served as
// before: it ends the GET.
func (feed *spliceFeed) awaitReader(ctx context.Context, off, reach int64, wait time.Duration, waits interface{ Add(float64) }) {
	if next := feed.next.Load(); off <= next || off-next > reach {
		return
	}
	waits.Add(1)
	t := time.NewTimer(reorderWait)
	defer t.Stop()
	deadline := time.Now().Add(wait)
	for {
		feed.movedMu.Lock()
		if feed.next.Load() >= off || feed.ended.Load() {
			feed.movedMu.Unlock()
			return
		}
		if feed.moved == nil {
			feed.moved = make(chan struct{})
		}
		moved := feed.moved
		feed.movedMu.Unlock()
		select {
		case <-moved:
			t.Reset(reorderWait)
		case <-t.C:
			if len(feed.turn) == 0 || time.Now().After(deadline) {
				return
			}
			t.Reset(reorderWait) // a read or its reply holds the turn
		case <-ctx.Done():
			return
		}
	}
}

// readerAt is the offset of the read the feed is ready for: the first byte
// in the pipe.
func (feed *spliceFeed) readerAt() int64 { return feed.pos - int64(feed.inPipe) }

// rewind forgets the pipe's bytes: the reader is at off, where ordinary
// reads take over once the feed has ended.
func (feed *spliceFeed) rewind(off int64) { feed.pos, feed.inPipe = off, 0 }

// fill sizes the pipe for a reply of want bytes (unless it holds more
// already) and splices from the socket into it until it holds want bytes
// or is full, adding to waits each time it had to wait for the socket.
func (feed *spliceFeed) fill(want int, waits interface{ Add(float64) }) error {
	if size := replyPipeSize(want); size != feed.size && size >= feed.inPipe {
		if _, err := unix.FcntlInt(uintptr(feed.pw), unix.F_SETPIPE_SZ, size); err != nil {
			return fmt.Errorf("pipe of %d bytes: %w", size, err)
		}
		feed.size = size
	}
	before := feed.body.Waits()
	moved, err := feed.body.SpliceTo(feed.pw, want-feed.inPipe)
	feed.pos += int64(moved)
	feed.inPipe += moved
	if w := feed.body.Waits() - before; w > 0 {
		waits.Add(float64(w))
	}
	return err
}

// fillAhead, after a reply of want bytes has left the pipe, splices into it
// what the socket holds already of the next reply of that size, without
// waiting for more, and returns how many bytes it moved. An error is left
// for the next read's fill to meet again (the socket keeps failing), or for
// the pipe check to end the feed.
func (feed *spliceFeed) fillAhead(want int) int {
	k := int(min(int64(want-feed.inPipe), feed.body.Left()))
	if k <= 0 {
		return 0
	}
	moved, _ := feed.body.SpliceReady(feed.pw, k)
	feed.pos += int64(moved)
	feed.inPipe += moved
	return moved
}

// fillBeside starts splicing the next k bytes of the socket into the spare
// pipe, on a goroutine of its own, so that it runs while the FUSE layer
// writes the reply in the other pipe (on another CPU) rather than after the
// next read has come. Nothing starts when k is 0 or the spare pipe cannot
// be had; the feed then fills its one pipe after the reply.
func (feed *spliceFeed) fillBeside(k int) {
	if k <= 0 || feed.noSpare {
		return
	}
	if size := replyPipeSize(k); size != feed.spare.size {
		if err := feed.sizeSpare(size); err != nil {
			// Over the user's pipe allowance (fs.pipe-user-pages-soft,
			// for a daemon without CAP_SYS_RESOURCE): one pipe serves.
			feed.noSpare = true
			return
		}
	}
	body, pw := feed.body, feed.spare.pw
	done := make(chan besideFill, 1)
	feed.beside = done
	go func() {
		before := body.Waits()
		moved, err := body.SpliceTo(pw, k)
		done <- besideFill{moved: moved, waits: body.Waits() - before, err: err}
	}()
}

// sizeSpare makes the spare pipe, the first time, and gives it size bytes.
func (feed *spliceFeed) sizeSpare(size int) error {
	if feed.spare.size == 0 {
		pr, pw, err := newReplyPipe()
		if err != nil {
			return err
		}
		if _, err := unix.FcntlInt(uintptr(pw), unix.F_SETPIPE_SZ, size); err != nil {
			unix.Close(pr)
			unix.Close(pw)
			return err
		}
		feed.spare = replyPipe{pr: pr, pw: pw, size: size}
		return nil
	}
	if _, err := unix.FcntlInt(uintptr(feed.spare.pw), unix.F_SETPIPE_SZ, size); err != nil {
		return err
	}
	feed.spare.size = size
	return nil
}

// joinBeside waits for the fill beside the reply, if one was started, and
// says what it moved; ok is false when none was started.
func (feed *spliceFeed) joinBeside(waits interface{ Add(float64) }) (fill besideFill, ok bool) {
	if feed.beside == nil {
		return fill, false
	}
	fill = <-feed.beside
	feed.beside = nil
	if fill.waits > 0 {
		waits.Add(float64(fill.waits))
	}
	return fill, true
}

// copyOut reads a reply of want bytes: those in the pipe (up to want), then
// the rest from the socket.
func (feed *spliceFeed) copyOut(want int) ([]byte, error) {
	data := make([]byte, want)
	fromPipe := min(feed.inPipe, want)
	for got := 0; got < fromPipe; {
		k, err := unix.Read(feed.pr, data[got:fromPipe])
		if err != nil || k == 0 {
			return nil, fmt.Errorf("read from the pipe after %d of %d bytes: %v", got, fromPipe, err)
		}
		got += k
		feed.inPipe -= k
	}
	if err := feed.body.ReadFull(data[fromPipe:]); err != nil {
		return nil, err
	}
	feed.pos += int64(want - fromPipe)
	return data, nil
}

// discard passes over the feed's next k bytes: those in the pipe, then
// the socket's.
func (feed *spliceFeed) discard(k int64) error {
	scratch := make([]byte, min(k, 256<<10))
	for k > 0 {
		c := int(min(k, int64(len(scratch))))
		if feed.inPipe > 0 {
			m, err := unix.Read(feed.pr, scratch[:min(c, feed.inPipe)])
			if err != nil || m == 0 {
				return fmt.Errorf("read from the pipe, %d bytes short of the reader: %v", k, err)
			}
			feed.inPipe -= m
			k -= int64(m)
			continue
		}
		if err := feed.body.ReadFull(scratch[:c]); err != nil {
			return err
		}
		feed.pos += int64(c)
		k -= int64(c)
	}
	return nil
}

// replyPipeSize is the capacity of the pipe a reply of n bytes waits in:
// that of the pipe go-fuse moves it into behind the reply's header (it
// grows one to the reply, its 16-byte header and a page; the kernel rounds
// a pipe's size up to a power of two pages). go-fuse's pipe takes every
// buffer of a reply that left ours a buffer free (one more for the
// header), whatever the sizes of the buffers.
func replyPipeSize(n int) int {
	page := os.Getpagesize()
	pages := (n + 16 + 2*page - 1) / page
	return page << bits.Len(uint(pages-1))
}

// openSplice sends the GET of [off, off+n) (the whole object, or a
// stream feed's range) and makes the pipe; nil when either fails (counted
// as refused), and the read goes the ordinary way.
func (h *Handle) openSplice(off, n int64) *spliceFeed {
	f := h.f
	refuse := func(err error) *spliceFeed {
		f.m.SpliceEnds.WithLabelValues(spliceRefused).Inc()
		f.log.Debug("spliced GET not started; ordinary reads serve", "bucket", h.obj.bucket, "key", h.obj.key, "err", err)
		return nil
	}
	if !f.fetch.gets.CanRaw() {
		return refuse(fmt.Errorf("%w: %T", objstore.ErrNoRaw, f.store))
	}
	pr, pw, err := newReplyPipe()
	if err != nil {
		return refuse(err)
	}
	// The reply's headers, and then each wait for the body's next byte,
	// within the read timeout, as for every GET of the read path.
	get, err := f.fetch.gets.Open(context.Background(), objstore.Range{Bucket: h.obj.bucket, Key: h.obj.key,
		Off: off, N: n, Version: h.obj.version}, true)
	if err == nil && get.Raw() == nil {
		get.Close()
		err = fmt.Errorf("%w: %T", objstore.ErrNoRaw, f.store)
	}
	if err != nil {
		unix.Close(pr)
		unix.Close(pw)
		return refuse(err)
	}
	feed := &spliceFeed{turn: make(chan struct{}, 1), get: get, body: get.Raw(), pr: pr, pw: pw,
		pos: off, start: off, end: off + n, ranged: off != 0 || n != h.obj.version.Size}
	if feed.ranged {
		f.m.SpliceStreamGets.Inc()
	} else {
		f.m.ReadStreams.Inc()
	}
	feed.served(off)
	return feed
}

// endSplice closes the feed's GET and pipe; called with the feed's turn.
// The whole-object GET hands the handle's place to the blocks: after an
// error, or when another handle started reading, they take over where the
// GET had got to, as a sequential reader. A stream feed leaves its
// stream's next reads to the blocks, which find it a stream of their own.
func (h *Handle) endSplice(feed *spliceFeed, why string, err error) {
	if feed.body == nil {
		return
	}
	feed.get.Close()
	feed.body = nil
	unix.Close(feed.pr)
	unix.Close(feed.pw)
	if feed.spare.size != 0 {
		unix.Close(feed.spare.pr)
		unix.Close(feed.spare.pw)
	}
	h.f.m.SpliceEnds.WithLabelValues(why).Inc()
	feed.ended.Store(true)
	feed.wake()
	if err != nil {
		h.f.log.Debug("spliced GET stopped; ordinary reads take over", "bucket", h.obj.bucket, "key", h.obj.key,
			"at", feed.readerAt(), "err", err)
	}
	if feed.ranged {
		h.spliced.streamEnded(feed, why)
		return
	}
	h.spliced.feed.CompareAndSwap(feed, nil)
	h.st.spliceEnded(h, feed.readerAt(), why == spliceError || why == spliceShared)
}

// spliceFailed ends the feed after its GET failed on the socket (a
// reset, a stall past the body's timeout) and sends the GET of the block
// the reader is at again at once, the failed GET counted as its first
// attempt, as a whole-object stream's failure is (stream.stop): the reader
// then gets its bytes or an error within the bound of ranged GETs alone
// (docs/operations.md), not a read timeout later. Called with the feed's
// turn.
func (h *Handle) spliceFailed(feed *spliceFeed, err error) {
	at := feed.readerAt()
	h.endSplice(feed, spliceError, err)
	h.f.fetch.again(h.obj, at/int64(h.f.cfg.BlockSize), err)
}

// close ends the handle's spliced GETs at close, each once a reply still
// being written has left its pipe; one not written within
// Config.ReadTimeout is left to end it.
func (s *splicer) close() {
	s.mu.Lock()
	feeds := append([]*spliceFeed(nil), s.streams...)
	s.mu.Unlock()
	if whole := s.feed.Load(); whole != nil {
		feeds = append(feeds, whole)
	}
	for _, feed := range feeds {
		s.closeFeed(feed)
	}
}

// closeFeed ends one of the handle's spliced GETs at close.
func (s *splicer) closeFeed(feed *spliceFeed) {
	if ok, _ := feed.take(context.Background(), s.h.f.cfg.ReadTimeout); !ok {
		s.abandon(feed, fmt.Errorf("closed with a reply not written within %v", s.h.f.cfg.ReadTimeout))
		return
	}
	s.h.endSplice(feed, spliceLeft, nil)
	s.give(feed)
}

// ReplyPipeSize is what a pipe must hold for splicing replies to reads of
// up to maxRead bytes (the mount's largest FUSE read): one reply and
// go-fuse's header before it.
func ReplyPipeSize(maxRead int) int { return replyPipeSize(maxRead) }

// newReplyPipe makes the pipe one spliced handle's replies pass through,
// non-blocking (a full pipe must not stall the socket's reader); each
// reply sizes it (spliceFeed.fill).
func newReplyPipe() (pr, pw int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return 0, 0, fmt.Errorf("pipe: %w", err)
	}
	return p[0], p[1], nil
}

// WantPipeMaxSize is what fs.pipe-max-size, the sysctl that bounds the
// pipes of a process without CAP_SYS_RESOURCE (1 MiB by default), should be
// for splicing replies to reads of up to maxRead bytes: twice what a reply
// needs (RaisePipeLimit).
func WantPipeMaxSize(maxRead int) int { return 2 * ReplyPipeSize(maxRead) }

// SpliceUsable says whether the kernel lets this process make the pipes
// splicing replies to reads of up to maxRead bytes needs: one of
// ReplyPipeSize(maxRead), above the default fs.pipe-max-size unless the
// process has CAP_SYS_RESOURCE.
func SpliceUsable(maxRead int) error {
	need := ReplyPipeSize(maxRead)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, need); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("a pipe of %d MiB is not allowed (fs.pipe-max-size must be at least %d: `sysctl fs.pipe-max-size=%d`): %w",
				need>>20, need, WantPipeMaxSize(maxRead), err)
		}
		return fmt.Errorf("pipe of %d MiB: %w", need>>20, err)
	}
	return nil
}
