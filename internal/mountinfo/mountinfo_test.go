package mountinfo

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// A FUSE mount whose path holds a space and a backslash, one with an
// optional field, and a line cut short: the two mounts, unescaped.
func TestParseUnescapesAndSplits(t *testing.T) {
	table := `36 35 98:0 / /mnt/a\040b\134c rw,nosuid,nodev shared:1 - fuse.s3gdsfs s3gdsfs:data\040set rw,user_id=0,group_id=0
37 35 0:40 / /dev/shm rw,nosuid master:2 shared:3 - tmpfs tmpfs rw
38 35 0:41 / /cut rw
`
	got, err := Parse(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{Point: `/mnt/a b\c`, Options: []string{"rw", "nosuid", "nodev"}, FSType: "fuse.s3gdsfs", Source: "s3gdsfs:data set",
			SuperOptions: []string{"rw", "user_id=0", "group_id=0"}},
		{Point: "/dev/shm", Options: []string{"rw", "nosuid"}, FSType: "tmpfs", Source: "tmpfs", SuperOptions: []string{"rw"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestUnescapeLeavesWhatIsNoEscape(t *testing.T) {
	for in, want := range map[string]string{`a\040b`: "a b", `a\0`: `a\0`, `a\999`: `a\999`, `\011x`: "\tx", "plain": "plain"} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// The process's own table holds its root.
func TestReadFindsTheRoot(t *testing.T) {
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		t.Skip("no /proc/self/mountinfo")
	}
	at, err := At("/")
	if err != nil {
		t.Fatal(err)
	}
	if len(at) == 0 || at[len(at)-1].FSType == "" {
		t.Fatalf("mounts at /: %+v", at)
	}
}
