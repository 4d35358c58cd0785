package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/internal/cli"
	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// sample is a value of the option's kind other than its default, and a
// text it refuses ("" for a string, which takes anything).
func sample(t *testing.T, o *option) (good, bad string) {
	t.Helper()
	switch v := o.value.(type) {
	case *stringValue, *addrValue:
		return "/some/thing", ""
	case *enumValue:
		return v.choices[len(v.choices)-1], "bogus-value"
	case *boolValue, *notBool:
		if o.value.String() == "true" {
			return "false", "bogus-value"
		}
		return "true", "bogus-value"
	case *intValue, *idValue:
		return "7", "bogus-value"
	case *durationValue:
		return "7s", "bogus-value"
	case *cli.Size, *intSize:
		return "3MiB", "bogus-value"
	case *modeFlag:
		return "0640", "bogus-value"
	case *policyFlag, *directIOFlag:
		if o.value.String() == "never" {
			return "always", "bogus-value"
		}
		return "never", "bogus-value"
	}
	t.Fatalf("--%s: no sample for a %T", o.name, o.value)
	return "", ""
}

// parsed parses args and returns the option's value as it prints.
func parsed(t *testing.T, name string, args ...string) (value string, positional []string, err error) {
	t.Helper()
	var mf mountFlags
	s := newOptionSet(&mf)
	positional, lists, err := s.parse(args, io.Discard)
	for _, l := range lists {
		if err == nil {
			err = s.applyList(l)
		}
	}
	return s.flags[name].value.String(), positional, err
}

func TestOptionTable(t *testing.T) {
	var mf mountFlags
	s := newOptionSet(&mf)
	seen := map[string]bool{}
	for i := range s.list {
		o := &s.list[i]
		if o.name == "" || seen[o.name] || o.group == "" || o.help == "" || o.def == "" {
			t.Errorf("option %q: want a new name, a group, help and a default", o.name)
		}
		seen[o.name] = true
		if strings.Contains(o.help, "\n") || len(o.help) > 240 {
			t.Errorf("--%s: help is %d characters or several lines; keep it to one short line (the why is in docs/)", o.name, len(o.help))
		}
		if _, ok := o.value.(bareValue); ok != (o.bare != "") {
			t.Errorf("--%s: may stand alone %v, but its value is a %T", o.name, o.bare != "", o.value)
		}
		if (o.arg == "") != (o.value.String() == "true" || o.value.String() == "false") {
			t.Errorf("--%s: a switch, and only a switch, has no ARG", o.name)
		}
		if helpFlags[o.name] || o.name == markdownFlag || o.name == markdownAdvancedFlag {
			t.Errorf("--%s: taken by the help", o.name)
		}
	}
	for key, o := range s.opts {
		if key != o.name && !slices.Contains(o.optAliases, key) {
			t.Errorf("-o %s: not a name nor an alias of --%s", key, o.name)
		}
	}
}

// Every option takes --name=value, --name value and -o name=value, with
// dashes or underscores; a refused value is named with its flag.
func TestEveryOptionTakesEveryForm(t *testing.T) {
	var mf mountFlags
	s := newOptionSet(&mf)
	for i := range s.list {
		o := &s.list[i]
		good, bad := sample(t, o)
		under := strings.ReplaceAll(o.name, "-", "_")
		forms := [][]string{
			{"--" + o.name + "=" + good, "/mnt"},
			{"--" + o.name, good, "/mnt"},
			{"-" + o.name, good, "/mnt"},
			{"/mnt", "-o", "rw," + under + "=" + good},
			{"-o", o.name + "=" + good, "/mnt"},
			{"-o=" + under + "=" + good, "/mnt"},
		}
		for _, args := range forms {
			v, pos, err := parsed(t, o.name, args...)
			if err != nil || !slices.Equal(pos, []string{"/mnt"}) {
				t.Errorf("%q: %v, positional %q; want /mnt", args, err, pos)
				continue
			}
			var want mountFlags
			w := newOptionSet(&want).flags[o.name].value
			w.Set(good)
			if v != w.String() {
				t.Errorf("%q: --%s is %s, want %s", args, o.name, v, w.String())
			}
		}
		if bad == "" {
			continue
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--" + o.name, bad, "/mnt"}, "--" + o.name + " " + bad + ": "},
			{[]string{"--" + o.name + "=" + bad, "/mnt"}, "--" + o.name + " " + bad + ": "},
			{[]string{"/mnt", "-o", under + "=" + bad}, "-o " + under + "=" + bad + ": "},
		} {
			if o.bare != "" && c.args[1] == bad {
				continue // alone, it leaves an argument that is none of its values
			}
			if _, _, err := parsed(t, o.name, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%q: error %v, want one naming %q", c.args, err, c.want)
			}
		}
	}
}

// A flag that may stand alone takes the next argument only when it is one
// of its values.
func TestBareFlagsAndTheSpaceForm(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
		pos  []string
	}{
		{"splice", []string{"--splice", "never", "/mnt"}, "never", []string{"/mnt"}},
		{"splice", []string{"--splice", "/mnt"}, "always", []string{"/mnt"}},
		{"splice", []string{"/mnt", "--splice"}, "always", []string{"/mnt"}},
		{"splice", []string{"--splice=never", "/mnt"}, "never", []string{"/mnt"}},
		{"splice", []string{"--splice", "off", "/mnt"}, "never", []string{"/mnt"}},
		{"splice", []string{"--splice", "./never"}, "always", []string{"./never"}},
		{"splice", []string{"/mnt", "-o", "splice"}, "always", []string{"/mnt"}},
		{"stream", []string{"--stream", "auto", "/mnt"}, "auto", []string{"/mnt"}},
		{"stream", []string{"--stream", "never", "--splice", "never", "/mnt"}, "never", []string{"/mnt"}},
		{"direct-io", []string{"--direct-io", "never", "/mnt"}, "never", []string{"/mnt"}},
		{"direct-io", []string{"--direct-io", "--stream", "/mnt"}, "always", []string{"/mnt"}},
		{"allow-other", []string{"--allow-other", "/mnt"}, "true", []string{"/mnt"}},
		{"allow-other", []string{"--allow-other", "false", "/mnt"}, "false", []string{"/mnt"}},
		{"foreground", []string{"--foreground=false", "/mnt"}, "false", []string{"/mnt"}},
		{"debug-fuse", []string{"/mnt", "-o", "debug"}, "true", []string{"/mnt"}},
		{"bucket", []string{"--", "--bucket", "x"}, "", []string{"--bucket", "x"}},
	} {
		v, pos, err := parsed(t, c.name, c.args...)
		if err != nil || v != c.want || !slices.Equal(pos, c.pos) {
			t.Errorf("%q: --%s %s, positional %q, %v; want %s, %q", c.args, c.name, v, pos, err, c.want, c.pos)
		}
	}
	cfg := mountConfig(t, "--endpoint", "http://127.0.0.1:1", "--splice", "never", "--direct-io", "never", "--stream", "never")
	if cfg.Splice != "never" || cfg.Core.DirectIO != vfs.DirectIONever || !cfg.Core.NoStream {
		t.Errorf("--splice never --direct-io never --stream never: splice %s, direct I/O %v, no stream %v", cfg.Splice, cfg.Core.DirectIO, cfg.Core.NoStream)
	}
}

func TestOptionMistakesAreNamed(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus", "/mnt"}, "unknown flag --bogus"},
		{[]string{"/mnt", "--region"}, "--region needs a value"},
		{[]string{"/mnt", "-o"}, "-o needs"},
		{[]string{"/mnt", "-o", "region"}, "-o region: needs a value"},
		{[]string{"/mnt", "-o", "colour=blue"}, "-o colour: unknown option"},
		{[]string{"/mnt", "-o", `region="a`}, "double quote is not closed"},
	} {
		if _, _, err := parsed(t, "region", c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.args, err, c.want)
		}
	}
}

// `mount --help` lists the flags a user sets and says where the advanced
// ones are; `mount --help-all` lists every flag.
func TestMountHelpListsEveryFlag(t *testing.T) {
	r := runCLI(t, nil, "mount", "--help")
	all := runCLI(t, nil, "mount", "--help-all")
	if r.Code != 0 || all.Code != 0 {
		t.Fatalf("mount --help: exit %d, stderr %q; --help-all: exit %d, stderr %q", r.Code, r.Stderr, all.Code, all.Stderr)
	}
	var mf mountFlags
	s := newOptionSet(&mf)
	listed := func(out string, o *option) bool {
		return strings.Contains(out, "  "+o.usageLine()+" ") || strings.Contains(out, "  "+o.usageLine()+"\n")
	}
	user, advanced := 0, 0
	for i := range s.list {
		o := &s.list[i]
		if !listed(all.Stdout, o) {
			t.Errorf("mount --help-all does not list %s", o.usageLine())
		}
		if o.advanced {
			advanced++
		} else {
			user++
		}
		if listed(r.Stdout, o) == o.advanced {
			t.Errorf("mount --help lists %s: %v; it is advanced: %v", o.usageLine(), listed(r.Stdout, o), o.advanced)
		}
	}
	t.Logf("%d flags: %d in --help, %d advanced", len(s.list), user, advanced)
	if !strings.Contains(r.Stdout, fmt.Sprintf("%d advanced flags", advanced)) || !strings.Contains(r.Stdout, "--help-all") {
		t.Errorf("mount --help does not say where the %d advanced flags are", advanced)
	}
	for _, g := range []string{groupStore, groupGPU} {
		if !strings.Contains(r.Stdout, "\n"+g+":\n") {
			t.Errorf("mount --help has no heading %q", g)
		}
	}
	for _, out := range []string{r.Stdout, all.Stdout} {
		if strings.Contains(out, markdownFlag) {
			t.Errorf("mount --help lists --%s", markdownFlag)
		}
		for _, line := range strings.Split(out, "\n") {
			if len(line) > 80 {
				t.Errorf("mount --help: line of %d characters: %q", len(line), line)
			}
		}
	}
	for _, c := range []struct {
		flag     string
		advanced bool
	}{{markdownFlag, false}, {markdownAdvancedFlag, true}} {
		if md := runCLI(t, nil, "mount", "--"+c.flag); md.Code != 0 || md.Stdout != s.markdown(c.advanced) {
			t.Errorf("mount --%s: exit %d, %d bytes; want the table, %d bytes", c.flag, md.Code, len(md.Stdout), len(s.markdown(c.advanced)))
		}
	}
}

var updateReadme = flag.Bool("update-readme", false, "write the mount flags' table into README.md")

// The tables the options make, and where they lie.
var flagTables = []struct {
	path       string
	begin, end string
	advanced   bool
}{
	{"../../README.md", markdownBegin, markdownEnd, false},
	{"../../docs/operations.md", markdownAdvancedBegin, markdownAdvancedEnd, true},
}

// README.md's flag table, and docs/operations.md's of the advanced flags,
// are the ones the options make.
func TestReadmeFlagTable(t *testing.T) {
	for _, tb := range flagTables {
		checkFlagTable(t, tb.path, tb.begin, tb.end, tb.advanced)
	}
}

func checkFlagTable(t *testing.T, path, markBegin, markEnd string, advanced bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	begin := strings.Index(readme, markBegin)
	end := strings.Index(readme, markEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no flag table between the lines\n%s\nand\n%s\n"+
			"Put them where it goes and fill it: go test ./cmd/s3gdsfs -run TestReadmeFlagTable -update-readme", path, markBegin, markEnd)
	}
	end += len(markEnd) + 1 // and its newline
	var mf mountFlags
	want := newOptionSet(&mf).markdown(advanced)
	got := readme[begin:min(end, len(readme))]
	if got == want {
		return
	}
	if *updateReadme {
		if err := os.WriteFile(path, []byte(readme[:begin]+want+readme[min(end, len(readme)):]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the flag table into %s", path)
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	line := 0
	for line < len(gl) && line < len(wl) && gl[line] == wl[line] {
		line++
	}
	at := func(l []string) string {
		if line < len(l) {
			return l[line]
		}
		return "(the end)"
	}
	t.Errorf("%s's flag table differs from the mount options in cmd/s3gdsfs/options.go, first at line %d:\n  file: %s\n  code: %s\n"+
		"Change the option there, not the file, and regenerate the table:\n  go test ./cmd/s3gdsfs -run TestReadmeFlagTable -update-readme\n"+
		"(or paste the output of `s3gdsfs mount --help-markdown` or `--help-markdown-advanced` over it).", path, strings.Count(readme[:begin], "\n")+line+1, at(gl), at(wl))
}

// --memory-limit alone is enough: the cache not given is half of it; a
// cache given larger than the limit is refused naming both flags.
func TestCacheSizeFollowsMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int64
	}{
		{nil, 1 << 30},
		{[]string{"--memory-limit", "256MiB"}, 128 << 20},
		{[]string{"-o", "memory_limit=256MiB"}, 128 << 20},
		{[]string{"--memory-limit", "8GiB"}, 4 << 30},
		{[]string{"--memory-limit", "256MiB", "--cache-size", "200MiB"}, 200 << 20},
		{[]string{"--memory-limit", "256MiB", "-o", "cache_size=64MiB"}, 64 << 20},
	} {
		cfg := mountConfig(t, append([]string{"--endpoint", "http://127.0.0.1:1"}, c.args...)...)
		if cfg.Core.CacheSize != c.want {
			t.Errorf("%v: cache %d, want %d", c.args, cfg.Core.CacheSize, c.want)
		}
		if _, err := vfs.New(nil, cfg.Core, metrics.New(func() float64 { return 0 }, func() float64 { return 0 }), slog.New(slog.DiscardHandler)); err != nil {
			t.Errorf("%v: %v", c.args, err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory-limit", "256MiB", "--cache-size", "1GiB"}, "--cache-size 1GiB is larger than --memory-limit 256MiB"},
		{[]string{"--cache-size", "3GiB"}, "--cache-size 3GiB is larger than --memory-limit 2GiB (its default)"},
		{[]string{"-o", "cache_size=3GiB,memory_limit=1GiB"}, "--cache-size 3GiB is larger than --memory-limit 1GiB"},
	} {
		_, _, err := parseMountArgs(append([]string{"--endpoint", "http://127.0.0.1:1"}, append(c.args, "/mnt")...), false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}
