package main

import (
	"fmt"
	"io"
	"strings"
)

// optionsIntro says how options are written, in `s3gdsfs mount --help`
// and above README.md's flag table; `code` is in backquotes.
const optionsIntro = "A flag takes its value as `--name=value` or `--name value`, and is also an `-o` option of the mount helper form, " +
	"with dashes or underscores: `--read-timeout 10s` is `-o read_timeout=10s`. " +
	"A switch, and a flag of `auto`, `always` and `never`, may be written alone (`--allow-other` is `true`, `--splice` is `always`); " +
	"followed by one of its values it takes it (`--splice never`, `--allow-other false`), followed by anything else it leaves it " +
	"(`--splice /mnt`; write `./never` for a mountpoint named so). " +
	"SIZE is bytes or a unit: `512KiB`, `64MiB`, `2GiB` (`KB`, `MB`, `GB` are powers of ten); DURATION is `500ms`, `30s`, `1m`."

// README.md's flag table lies between these lines, and docs/operations.md's
// table of advanced flags between the second pair.
const (
	markdownBegin         = "<!-- mount flags: made by `s3gdsfs mount --help-markdown` from cmd/s3gdsfs/options.go; TestReadmeFlagTable checks it -->"
	markdownEnd           = "<!-- end of mount flags -->"
	markdownAdvancedBegin = "<!-- advanced mount flags: made by `s3gdsfs mount --help-markdown-advanced` from cmd/s3gdsfs/options.go; TestReadmeFlagTable checks it -->"
	markdownAdvancedEnd   = "<!-- end of advanced mount flags -->"
)

// advancedIntro heads the advanced flags, in `mount --help-all` and
// docs/operations.md.
const advancedIntro = "Advanced flags tune the read paths and are what the benchmarks vary (docs/benchmarks.md); " +
	"their defaults are the measured best. They are written as the others are."

// usageLine is the option as the usage shows it: --name ARG, --name [ARG]
// for one that may stand alone, --name for a switch.
func (o *option) usageLine() string {
	switch {
	case o.arg == "":
		return "--" + o.name
	case o.bare != "":
		return "--" + o.name + " [" + o.arg + "]"
	}
	return "--" + o.name + " " + o.arg
}

// notes are what follows the help: other -o spellings, where the default's
// reasons are measured.
func (o *option) notes(link func(string) string) []string {
	var n []string
	if o.flagOnly {
		n = append(n, "not an `-o` option")
	}
	if len(o.optAliases) > 0 {
		var spell []string
		for _, a := range o.optAliases {
			spell = append(spell, "`-o "+a+"`")
		}
		n = append(n, "also "+orList(spell))
	}
	if o.why != "" {
		n = append(n, "why the default: "+link(o.why))
	}
	return n
}

// groups are the options of one tier by group, in order.
func (s *optionSet) groups(advanced bool) (names []string, members map[string][]*option) {
	members = map[string][]*option{}
	for i := range s.list {
		o := &s.list[i]
		if o.advanced != advanced {
			continue
		}
		if members[o.group] == nil {
			names = append(names, o.group)
		}
		members[o.group] = append(members[o.group], o)
	}
	return names, members
}

func plain(s string) string { return strings.ReplaceAll(s, "`", "") }

// advancedCount is how many options are advanced.
func (s *optionSet) advancedCount() int {
	n := 0
	for i := range s.list {
		if s.list[i].advanced {
			n++
		}
	}
	return n
}

// usage is `s3gdsfs mount --help`, and with all `--help-all`: the
// advanced flags too, after the others.
func (s *optionSet) usage(w io.Writer, all bool) {
	const width = 80
	fmt.Fprint(w, `usage: s3gdsfs mount --endpoint URL [--bucket NAME[/PREFIX]] [flags] MOUNTPOINT
       s3gdsfs SOURCE MOUNTPOINT -o key=value,...   (mount helper form, fstab)

`)
	for _, line := range wrap(plain(optionsIntro), width) {
		fmt.Fprintln(w, line)
	}
	s.usageTier(w, false, "")
	if !all {
		fmt.Fprintf(w, "\n%d advanced flags (tuning and benchmark knobs): s3gdsfs mount --help-all;\ndocs/operations.md lists them.\n", s.advancedCount())
		return
	}
	fmt.Fprintln(w, "\nADVANCED FLAGS")
	for _, line := range wrap(plain(advancedIntro), width) {
		fmt.Fprintln(w, line)
	}
	s.usageTier(w, true, " (advanced)")
}

func (s *optionSet) usageTier(w io.Writer, advanced bool, suffix string) {
	const width, column = 80, 30
	names, members := s.groups(advanced)
	for _, g := range names {
		fmt.Fprintf(w, "\n%s%s:\n", g, suffix)
		for _, o := range members[g] {
			text := o.help + " (default " + o.def + ")"
			if n := o.notes(func(doc string) string { return doc }); len(n) > 0 {
				text += "; " + strings.Join(n, "; ")
			}
			left := "  " + o.usageLine()
			lines := wrap(plain(text), width-column)
			if len(left) >= column-1 {
				fmt.Fprintln(w, left)
			} else {
				fmt.Fprintf(w, "%-*s%s\n", column, left, lines[0])
				lines = lines[1:]
			}
			for _, l := range lines {
				fmt.Fprintf(w, "%*s%s\n", column, "", l)
			}
		}
	}
}

// markdown is README.md's flag table, between its marker lines, or with
// advanced docs/operations.md's table of the advanced flags. Their links
// are relative to the file's own folder.
func (s *optionSet) markdown(advanced bool) string {
	var b strings.Builder
	begin, end, intro := markdownBegin, markdownEnd, optionsIntro
	link := func(doc string) string { return "[" + doc + "](" + doc + ")" }
	if advanced {
		begin, end, intro = markdownAdvancedBegin, markdownAdvancedEnd, advancedIntro
		link = func(doc string) string { return "[" + doc + "](" + strings.TrimPrefix(doc, "docs/") + ")" }
	}
	fmt.Fprintf(&b, "%s\n\n%s\n", begin, strings.Join(wrap(intro, 100), "\n"))
	if !advanced {
		fmt.Fprintf(&b, "\n%d advanced flags, tuning and benchmark knobs, are in [docs/operations.md](docs/operations.md#advanced-flags) "+
			"and `s3gdsfs mount --help-all`.\n", s.advancedCount())
	}
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	names, members := s.groups(advanced)
	for _, g := range names {
		fmt.Fprintf(&b, "\n**%s**\n\n| flag | default | meaning |\n| --- | --- | --- |\n", g)
		for _, o := range members[g] {
			text := o.help
			if n := o.notes(link); len(n) > 0 {
				text += "; " + strings.Join(n, "; ")
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", cell(o.usageLine()), cell(o.def), cell(text))
		}
	}
	fmt.Fprintf(&b, "\n%s\n", end)
	return b.String()
}

// wrap breaks text into lines of at most width bytes, at spaces outside
// `code`.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		inCode := strings.Count(line, "`")%2 == 1
		if line != "" && !inCode && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}
