package staging_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
	"github.com/s3gdsfs/s3gdsfs/internal/cufiletest"
)

// TryAcquireSlot takes free slots without waiting and says nil, at once,
// when every slot is out, even while a copy that would free one is under
// way; ReleaseSlot on the stager gives one back.
func TestTryAcquireSlotNeverWaits(t *testing.T) {
	b, dir := standin(t)
	hoststandin.SlowCopies(b, time.Second)
	path := cufiletest.StandinFile(t, dir, "buf", 64, 0)
	a, err := b.Import(0, cufiletest.NameHandle(path))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: 64, Slots: 2, Streams: 1})
	s1, s2 := st.TryAcquireSlot(), st.TryAcquireSlot()
	if s1 == nil || s2 == nil || s1 == s2 {
		t.Fatalf("two slots of a ring of two: %p %p", s1, s2)
	}
	c, _ := st.NewCopier()
	if err := c.CopyAsync(s1, 64, a, 0); err != nil {
		t.Fatal(err)
	}
	if s := st.TryAcquireSlot(); s != nil {
		t.Fatal("a third slot while both are out")
	}
	// Had it waited for the copy, it would have had its slot.
	if _, copying := st.Busy(); copying != 1 {
		t.Fatalf("%d copies under way after TryAcquireSlot said none free, want 1: it waited", copying)
	}
	st.ReleaseSlot(s2)
	if s := st.TryAcquireSlot(); s != s2 {
		t.Fatalf("after ReleaseSlot: %p, want the slot given back", s)
	}
	st.ReleaseSlot(s2)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if held, copying := st.Busy(); held != 0 || copying != 0 {
		t.Fatalf("%d held, %d copying after every slot came back", held, copying)
	}
}

// A held slot's bytes are copied, in pieces, by two copiers into two
// destinations, and stay in the slot, held, for more copies; a slot not
// held is refused, and so is a piece past the slot.
func TestCopyHeldAsyncLeavesTheSlotHeld(t *testing.T) {
	b, dir := standin(t)
	pa, pb := cufiletest.StandinFile(t, dir, "a", 100, 0xEE), cufiletest.StandinFile(t, dir, "b", 100, 0xEE)
	da, _ := b.Import(0, cufiletest.NameHandle(pa))
	db, _ := b.Import(0, cufiletest.NameHandle(pb))
	defer da.Close()
	defer db.Close()
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: 64, Slots: 1, Streams: 2})
	slot, err := st.AcquireSlot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	src := cufiletest.Pattern(64, 5)
	copy(slot.Buf, src)
	c1, _ := st.NewCopier()
	c2, _ := st.NewCopier()
	if err := c1.CopyHeldAsync(slot, 0, 40, da, 10); err != nil {
		t.Fatal(err)
	}
	if err := c2.CopyHeldAsync(slot, 40, 24, db, 0); err != nil {
		t.Fatal(err)
	}
	if err := c1.CopyHeldAsync(slot, 40, 24, da, 50); err != nil {
		t.Fatal(err)
	}
	if err := c1.CopyHeldAsync(slot, 60, 5, da, 0); err == nil {
		t.Fatal("a piece past the slot's end was taken")
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if held, copying := st.Busy(); held != 1 || copying != 0 {
		t.Fatalf("after held copies: %d held, %d copying; want the slot still held", held, copying)
	}
	if !bytes.Equal(slot.Buf, src) {
		t.Fatal("the held slot's bytes changed")
	}
	got, _ := os.ReadFile(pa)
	want := bytes.Repeat([]byte{0xEE}, 100)
	copy(want[10:], src[:40])
	copy(want[50:], src[40:])
	if !bytes.Equal(got, want) {
		t.Fatal("destination a: wrong bytes")
	}
	got, _ = os.ReadFile(pb)
	want = bytes.Repeat([]byte{0xEE}, 100)
	copy(want, src[40:])
	if !bytes.Equal(got, want) {
		t.Fatal("destination b: wrong bytes")
	}
	st.ReleaseSlot(slot)
	c3, _ := st.NewCopier()
	defer c3.Close()
	if err := c3.CopyHeldAsync(slot, 0, 1, da, 0); err == nil {
		t.Fatal("CopyHeldAsync took a released slot")
	}
}
