package rdmatoken

import (
	"errors"
	"strings"
	"testing"
)

var sample = Token{
	Addr: 0x00007f3a12345000, Size: 0x40000000, RKey: 0x0badcafe, LID: 0x0012, DCT: 0xabcdef,
	HasGID: true, GID: [16]byte{0xfe, 0x80, 10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 0, 15: 7},
}

const sampleWire = "00007f3a12345000:40000000:0badcafe:0012:abcdef:1:fe800000000000000000ffff0a000007"

func TestStringIsTheWireForm(t *testing.T) {
	s := sample.String()
	if s != sampleWire {
		t.Fatalf("String() = %q\nwant       %q", s, sampleWire)
	}
	if len(s) != Len {
		t.Fatalf("len = %d, want %d", len(s), Len)
	}
	widths := []int{16, 8, 8, 4, 6, 1, 32}
	for i, p := range strings.Split(s, ":") {
		if len(p) != widths[i] {
			t.Errorf("field %d has %d characters, want %d", i, len(p), widths[i])
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tok := range []Token{
		sample,
		{},
		{Addr: ^uint64(0), Size: ^uint32(0), RKey: ^uint32(0), LID: ^uint16(0), DCT: 0xffffff, HasGID: true,
			GID: [16]byte{0: 0xff, 15: 0xff}},
		{Addr: 1, Size: 1, RKey: 1, LID: 1, DCT: 1},
	} {
		got, err := Parse(tok.String())
		if err != nil {
			t.Fatalf("Parse(%q): %v", tok.String(), err)
		}
		if got != tok {
			t.Errorf("round trip of %+v gave %+v", tok, got)
		}
	}
}

func TestStringDropsDCTBitsBeyond24(t *testing.T) {
	tok := sample
	tok.DCT = 0x1abcdef
	if s := tok.String(); len(s) != Len || !strings.Contains(s, ":abcdef:") {
		t.Fatalf("String() = %q", s)
	}
}

func TestParseRejects(t *testing.T) {
	replace := func(field int, v string) string {
		p := strings.Split(sampleWire, ":")
		p[field] = v
		return strings.Join(p, ":")
	}
	cases := []struct {
		name, in, field string
	}{
		{"empty", "", "token"},
		{"six fields", sampleWire[:strings.LastIndexByte(sampleWire, ':')], "token"},
		{"eight fields", sampleWire + ":00", "token"},
		{"old 115-char form", sampleWire + ":00007f3a12345000:0000000040000000", "token"},
		{"addr short", replace(0, "7f3a12345000"), "addr"},
		{"addr long", replace(0, "000007f3a12345000"), "addr"},
		{"addr upper", replace(0, "00007F3A12345000"), "addr"},
		{"addr 0x", replace(0, "0x007f3a12345000"), "addr"},
		{"size short", replace(1, "4000000"), "size"},
		{"size non-hex", replace(1, "4000000g"), "size"},
		{"rkey long", replace(2, "0badcafe0"), "rkey"},
		{"rkey upper", replace(2, "0BADCAFE"), "rkey"},
		{"lid short", replace(3, "012"), "lid"},
		{"lid sign", replace(3, "+012"), "lid"},
		{"dct long", replace(4, "0abcdef"), "dct"},
		{"dct space", replace(4, "abcde "), "dct"},
		{"gid flag 2", replace(5, "2"), "gid_present"},
		{"gid flag empty", replace(5, ""), "gid_present"},
		{"gid flag hex", replace(5, "f"), "gid_present"},
		{"gid short", replace(6, "fe800000000000000000ffff0a00000"), "gid"},
		{"gid upper", replace(6, "FE800000000000000000FFFF0A000007"), "gid"},
		{"trailing newline", sampleWire + "\n", "gid"},
		{"leading space", " " + sampleWire, "addr"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.in)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Parse(%q) = %v, want a FieldError", c.in, err)
			}
			if fe.Field != c.field {
				t.Errorf("field %q, want %q (%v)", fe.Field, c.field, err)
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.field) {
				t.Errorf("error %q should wrap ErrMalformed and name %q", err, c.field)
			}
		})
	}
}

func TestOld115CharFormIsNamed(t *testing.T) {
	old := sampleWire + ":00007f3a12345000:0000000040000000"
	if len(old) != 115 {
		t.Fatalf("test token has %d characters", len(old))
	}
	_, err := Parse(old)
	if err == nil || !strings.Contains(err.Error(), "115") {
		t.Fatalf("Parse(old form) = %v, want an error naming the 115-character form", err)
	}
}

func TestSplitRange(t *testing.T) {
	const G = MaxServerOp
	cases := []struct {
		off, n int64
		want   []Part
	}{
		{0, 0, nil},
		{5, -1, nil},
		{-1, 10, nil},
		{7, 1, []Part{{7, 1}}},
		{0, G, []Part{{0, G}}},
		{3, G + 1, []Part{{3, G}, {G + 3, 1}}},
		{100, 3*G - 5, []Part{{100, G}, {100 + G, G}, {100 + 2*G, G - 5}}},
	}
	for _, c := range cases {
		got := SplitRange(c.off, c.n, MaxServerOp)
		if len(got) != len(c.want) {
			t.Fatalf("SplitRange(%d, %d) = %v, want %v", c.off, c.n, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("SplitRange(%d, %d)[%d] = %v, want %v", c.off, c.n, i, got[i], c.want[i])
			}
		}
	}
}

func TestSplitRangeCoversExactly(t *testing.T) {
	for _, n := range []int64{1, MaxServerOp - 1, MaxServerOp, MaxServerOp + 1, 5*MaxServerOp + 12345, 1 << 40} {
		off := int64(4096)
		next, total := off, int64(0)
		for _, p := range SplitRange(off, n, 0) {
			if p.Off != next || p.Len <= 0 || p.Len > MaxServerOp || p.Len > MaxRegistration {
				t.Fatalf("n=%d: bad part %+v (expected offset %d)", n, p, next)
			}
			next += p.Len
			total += p.Len
		}
		if total != n {
			t.Fatalf("n=%d: parts cover %d bytes", n, total)
		}
	}
}

// A token for the largest registration carries its whole size through the
// wire form, whose size field is 32 bits.
func TestATokenCoversTheLargestRegistration(t *testing.T) {
	tok := sample
	tok.Size = MaxRegistration
	got, err := Parse(tok.String())
	if err != nil || int64(got.Size) != MaxRegistration {
		t.Fatalf("a token of %d bytes parses back as %d bytes, %v", int64(MaxRegistration), got.Size, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sampleWire)
	f.Add(Token{}.String())
	f.Add(sampleWire + ":00007f3a12345000:0000000040000000")
	f.Add(strings.ToUpper(sampleWire))
	f.Add("::::::")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// Whatever parses is exactly the wire form of what it parsed to.
		if back := tok.String(); back != s {
			t.Fatalf("Parse(%q) then String() = %q", s, back)
		}
		if len(s) != Len {
			t.Fatalf("accepted %d characters", len(s))
		}
	})
}
