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

// README.md's flag table lies between these lines.
const (
	markdownBegin = "<!-- mount flags: made by `s3gdsfs mount --help-markdown` from cmd/s3gdsfs/options.go; TestReadmeFlagTable checks it -->"
	markdownEnd   = "<!-- end of mount flags -->"
)

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

func (s *optionSet) groups() (names []string, members map[string][]*option) {
	members = map[string][]*option{}
	for i := range s.list {
		o := &s.list[i]
		if members[o.group] == nil {
			names = append(names, o.group)
		}
		members[o.group] = append(members[o.group], o)
	}
	return names, members
}

func plain(s string) string { return strings.ReplaceAll(s, "`", "") }

// usage is `s3gdsfs mount --help`.
func (s *optionSet) usage(w io.Writer) {
	const width, column = 80, 30
	fmt.Fprint(w, `usage: s3gdsfs mount --endpoint URL [--bucket NAME[/PREFIX]] [flags] MOUNTPOINT
       s3gdsfs SOURCE MOUNTPOINT -o key=value,...   (mount helper form, fstab)

`)
	for _, line := range wrap(plain(optionsIntro), width) {
		fmt.Fprintln(w, line)
	}
	names, members := s.groups()
	for _, g := range names {
		fmt.Fprintf(w, "\n%s:\n", g)
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

// markdown is README.md's flag table, between its marker lines.
func (s *optionSet) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n%s\n", markdownBegin, strings.Join(wrap(optionsIntro, 100), "\n"))
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	names, members := s.groups()
	for _, g := range names {
		fmt.Fprintf(&b, "\n**%s**\n\n| flag | default | meaning |\n| --- | --- | --- |\n", g)
		for _, o := range members[g] {
			text := o.help
			if n := o.notes(func(doc string) string { return "[" + doc + "](" + doc + ")" }); len(n) > 0 {
				text += "; " + strings.Join(n, "; ")
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", cell(o.usageLine()), cell(o.def), cell(text))
		}
	}
	fmt.Fprintf(&b, "\n%s\n", markdownEnd)
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
