package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/cli"
	"github.com/s3gdsfs/s3gdsfs/internal/setting"
)

// An option is one setting of the mount command. mountOptions is the only
// list of them: the flags, the -o options of the mount helper form,
// `s3gdsfs mount --help` (and --help-all), README.md's flag table
// (--help-markdown) and docs/operations.md's table of advanced flags are
// all made from it. An option sets a field of the mount's daemon.Config,
// whose defaults (daemon.Default) and checks (Validate) are the
// configuration's; a refused field is named here by its flag.
type option struct {
	name  string      // the flag without dashes; -o takes it with dashes or underscores
	group string      // heading it is listed under
	value optionValue // what it sets, holding its default
	arg   string      // what the value is, in the usage line (URL, SIZE); none for a switch
	help  string      // one line: what it does (`code` in backquotes)
	// advanced options are tuning and benchmark knobs: listed by
	// `mount --help-all` and docs/operations.md, not by `mount --help`.
	advanced bool
	// def is the default as documented, where it is not the value's own
	// (it depends on the environment or the machine, or is empty).
	def string
	// bare is the value of the flag written alone; "" when it needs one.
	// A bare flag followed by an argument its value accepts takes it
	// (--splice never), and leaves any other (--splice /mnt).
	bare string
	// why names where the default's reasons are measured.
	why string
	// flagOnly is a flag that is no -o option; optAliases are -o
	// spellings beside the name.
	flagOnly   bool
	optAliases []string
	// fields are the daemon.Config settings the option decides besides
	// the one its value points at (--bucket: Core.Bucket and Core.Prefix),
	// so that a refusal of them names the flag.
	fields []string
}

// optionValue is what a flag sets: the value parses its text (errors say
// what is wanted, not the flag, which the caller names) and prints itself.
type optionValue interface {
	Set(string) error
	String() string
}

// bareValue is a value its flag may go without: accepts says whether the
// argument after the bare flag is one of its values.
type bareValue interface {
	optionValue
	accepts(string) bool
}

// Groups, in the order they are listed.
const (
	groupStore   = "S3 endpoint"
	groupFiles   = "Files and names"
	groupWrites  = "Writes"
	groupMemory  = "Memory and prefetching"
	groupStream  = "Whole-object streams and splicing"
	groupKernel  = "Page cache and FUSE"
	groupRetry   = "Timeouts and retries"
	groupGPU     = "GPU reads"
	groupProcess = "Process, log and metrics"
)

const benchmarksDoc = "docs/benchmarks.md"

// mountFlags are the mount command's settings: the mount's configuration,
// which the flags set field by field, and what the command itself reads.
type mountFlags struct {
	daemon.Config
	bucket                   string     // NAME[/PREFIX]: Core.Bucket and Core.Prefix
	stream                   policyFlag // auto, always, never: Core.NoStream for the endpoint
	writeChecksum            string     // signature, crc32c: S3.PartCRC32C
	credentialsFile, profile string
	logLevel, logFile        string
	foreground               bool
}

// mountOptions sets mf to the defaults and returns the options that set
// its fields.
func mountOptions(mf *mountFlags) []option {
	mf.Config = daemon.Default()
	mf.S3.Endpoint = os.Getenv("AWS_ENDPOINT_URL")
	mf.S3.Region = envOr("AWS_REGION", mf.S3.Region)
	mf.S3.CABundle = os.Getenv("AWS_CA_BUNDLE")
	mf.bucket, mf.stream, mf.credentialsFile, mf.profile = "", "auto", "", envOr("AWS_PROFILE", "default")
	mf.logLevel, mf.logFile, mf.foreground = "info", "", true
	mf.writeChecksum = "signature"
	c := &mf.Config
	opts := []option{
		{name: "endpoint", group: groupStore, arg: "URL", value: (*stringValue)(&c.S3.Endpoint), def: "`$AWS_ENDPOINT_URL`",
			help: "S3 endpoint, `http(s)://host[:port]`; required"},
		{name: "bucket", group: groupStore, arg: "NAME[/PREFIX]", value: (*stringValue)(&mf.bucket), def: "every bucket", fields: []string{"Core.Bucket", "Core.Prefix"},
			help: "mount one bucket, or a prefix of it; without it every bucket the credentials can list is a directory"},
		{name: "region", group: groupStore, arg: "REGION", value: (*stringValue)(&c.S3.Region), def: "`$AWS_REGION`, else `us-east-1`",
			help: "S3 region"},
		{name: "ca-bundle", group: groupStore, arg: "FILE", value: (*stringValue)(&c.S3.CABundle), def: "`$AWS_CA_BUNDLE`, else none",
			help: "PEM file of CA certificates trusted beside the system store, for https endpoints"},
		{name: "credentials-file", group: groupStore, arg: "FILE", value: (*stringValue)(&mf.credentialsFile), def: "the standard chain",
			help: "AWS shared-credentials file to take the keys from, for fstab and systemd; mode 0600, owned by the mounting user or root (docs/operations.md)"},
		{name: "profile", group: groupStore, arg: "NAME", value: (*stringValue)(&mf.profile), def: "`$AWS_PROFILE`, else `default`",
			help: "profile of `--credentials-file` to read"},
		{name: "virtual-host", group: groupStore, value: (*boolValue)(&c.S3.VirtualHost), bare: "true",
			help: "virtual-hosted-style addressing (`bucket.host`) instead of path-style"},

		{name: "uid", group: groupFiles, arg: "UID", value: (*idValue)(&c.FS.UID), def: "the caller's",
			help: "owner of every file and directory (0 to 4294967294)"},
		{name: "gid", group: groupFiles, arg: "GID", value: (*idValue)(&c.FS.GID), def: "the caller's",
			help: "group of every file and directory (0 to 4294967294)"},
		{name: "file-mode", group: groupFiles, arg: "MODE", value: (*modeFlag)(&c.FS.FileMode),
			help: "permission bits of files, in octal"},
		{name: "dir-mode", group: groupFiles, arg: "MODE", value: (*modeFlag)(&c.FS.DirMode),
			help: "permission bits of directories, in octal"},
		{name: "allow-other", group: groupFiles, value: (*boolValue)(&c.FS.AllowOther), bare: "true",
			help: "let other users use the mount; the modes still apply (docs/operations.md)"},
		{name: "meta-ttl", group: groupFiles, arg: "DURATION", value: (*durationValue)(&c.Core.MetaTTL),
			help: "how long names and sizes are cached; `0`: not cached"},
		{name: "negative-ttl", group: groupFiles, arg: "DURATION", value: (*durationValue)(&c.Core.NegativeTTL),
			help: "how long a missing name is cached; `0`: not cached"},

		{name: "allow-writes", group: groupWrites, value: (*boolValue)(&c.Core.Writes.Allow), bare: "true",
			help: "let new files be written (in order, uploaded as they are written), renamed and removed, and directories made; off: the mount is read-only (docs/operations.md, \"Writes\")"},
		{name: "allow-overwrite", group: groupWrites, value: (*boolValue)(&c.Core.Writes.AllowOverwrite), bare: "true",
			help: "with `--allow-writes`, let an open with `O_TRUNC` or a rename replace an existing object"},
		{name: "write-part-size", group: groupWrites, arg: "SIZE", value: (*cli.Size)(&c.Core.Writes.PartSize), advanced: true,
			help: "part of a multipart upload; a file is at most 10,000 parts, and one closed within its first part is one PUT"},
		{name: "write-parts", group: groupWrites, arg: "N", value: (*intValue)(&c.Core.Writes.PartsInFlight), advanced: true,
			help: "parts of one file sent at once; a writer that has filled one more waits (its memory counts in `--memory-limit`); as many parts of an object over 5 GiB are copied at once by a rename"},
		{name: "write-checksum", group: groupWrites, arg: "KIND", value: &enumValue{&mf.writeChecksum, []string{"signature", "crc32c"}}, advanced: true, fields: []string{"S3.PartCRC32C"},
			help: "how the server checks each upload part's body: `signature` (signed), or `crc32c` (its CRC32C in a trailer; the server must take those)"},
		{name: "upload-journal", group: groupWrites, arg: "DIR", value: (*stringValue)(&c.Core.Writes.Journal), def: "`$XDG_STATE_HOME/s3gdsfs/uploads`, else `~/.local/state/s3gdsfs/uploads` (root without `$HOME`: `/var/lib/s3gdsfs/uploads`)", advanced: true,
			help: "where the multipart uploads in progress are recorded, so that a start after a killed daemon aborts those it left; empty: none"},

		{name: "memory-limit", group: groupMemory, arg: "SIZE", value: (*cli.Size)(&c.Core.MemoryLimit),
			help: "all block memory: prefetch buffers and cache"},
		{name: "cache-size", group: groupMemory, arg: "SIZE", value: (*cli.Size)(&c.Core.CacheSize),
			def:  "`" + cli.FormatSize(c.Core.CacheSize) + "`, half of `--memory-limit`",
			help: "block cache (blocks already read), part of `--memory-limit`; not given, half of it; `0`: none"},
		{name: "block-size", group: groupMemory, arg: "SIZE", value: (*intSize)(&c.Core.BlockSize), advanced: true,
			help: "unit of caching and of random reads"},
		{name: "part-size", group: groupMemory, arg: "SIZE", value: (*cli.Size)(&c.Core.PartSize), advanced: true,
			help: "bytes per ranged GET of a sequential reader"},
		{name: "initial-window", group: groupMemory, arg: "SIZE", value: (*cli.Size)(&c.Core.InitialWindow), advanced: true,
			help: "first prefetch window of a sequential reader; it doubles up to `--max-window`"},
		{name: "max-window", group: groupMemory, arg: "SIZE", value: (*cli.Size)(&c.Core.MaxWindow), advanced: true,
			help: "largest prefetch window per open file"},

		{name: "stream", group: groupStream, arg: "WHEN", value: &mf.stream, bare: "always", fields: []string{"Core.NoStream"},
			help: "one GET of the whole object feeds a reader that starts at an object's beginning: `auto` when the endpoint is on this host or a private network, " +
				"`always` (the flag alone) or `never` (ranged GETs only)"},
		{name: "stream-min-rate", group: groupStream, arg: "SIZE", value: (*cli.Size)(&c.Core.StreamMinRate), advanced: true,
			help: "bytes per second a stream must deliver while it is read, or ranged GETs take over; `0`: never"},
		{name: "stream-idle", group: groupStream, arg: "DURATION", value: (*durationValue)(&c.Core.StreamIdle), advanced: true,
			help: "close a stream that had nothing to read this long"},
		{name: "raw-gets", group: groupStream, value: (*notBool)(&c.Core.ClientGets), bare: "true", advanced: true, why: benchmarksDoc,
			help: "read the GET bodies of POSIX reads' blocks on connections of their own, many bytes per wake-up, where the endpoint is plain HTTP and no proxy is set; `false`: through the HTTP client"},
		{name: "splice", group: groupStream, arg: "WHEN", value: (*policyFlag)(&c.Splice), bare: "always", why: benchmarksDoc, advanced: true,
			help: "feed a direct-I/O reader straight from its stream's socket with `splice(2)`: `auto` over http, `always` (the flag alone; else the mount fails) or `never`"},
		{name: "splice-streams", group: groupStream, value: (*boolValue)(&c.Core.SpliceStreams), bare: "true", why: benchmarksDoc, advanced: true,
			help: "where `--splice` is on, also feed each run of in-order direct-I/O reads elsewhere in a file (many threads' preads of one file) from a spliced ranged GET of its own; `false`: the blocks serve them"},

		{name: "direct-io", group: groupKernel, arg: "WHEN", value: (*directIOFlag)(&c.Core.DirectIO), bare: "always",
			help: "page cache policy: `auto` (objects of at least `--direct-io-min-size` bypass the page cache, smaller ones use it), `always` (the flag alone) or `never`"},
		{name: "direct-io-min-size", group: groupKernel, arg: "SIZE", value: (*cli.Size)(&c.Core.DirectIOMinSize), advanced: true,
			help: "the smallest object `--direct-io=auto` reads with direct I/O"},
		{name: "fuse-max-read", group: groupKernel, arg: "SIZE", value: (*intSize)(&c.FS.MaxRead), why: benchmarksDoc, advanced: true,
			help: "the largest read (and write) request the kernel sends the daemon, up to `16MiB`; above `1MiB` the kernel's `fs.fuse.max_pages_limit` must allow it, which the daemon raises as root (kernel 6.13 and later)"},
		{name: "read-ahead", group: groupKernel, arg: "SIZE", value: (*cli.Size)(&c.ReadAhead), advanced: true,
			help: "kernel readahead for the mount (`0` keeps the kernel's 128KiB; needs root)"},
		{name: "fuse-poll", group: groupKernel, arg: "DURATION", value: (*durationValue)(&c.FS.PollRequests), def: "`1ms` with 8 CPUs or more, else `0`", why: benchmarksDoc, advanced: true,
			help: "how long a thread that has just replied polls `/dev/fuse` for the next request before it sleeps, at most " +
				formatDuration(daemon.MaxPollRequests) + "; it also fills a spliced reader's next reply ahead; `0`: none"},
		{name: "debug-fuse", group: groupKernel, value: (*boolValue)(&c.FS.Debug), bare: "true", optAliases: []string{"debug"}, advanced: true,
			help: "log every FUSE request"},

		{name: "connect-timeout", group: groupRetry, arg: "DURATION", value: (*durationValue)(&c.S3.ConnectTimeout),
			help: "bound on connecting to the endpoint; above 0"},
		{name: "read-timeout", group: groupRetry, arg: "DURATION", value: (*durationValue)(&c.Read.ReadTimeout),
			help: "a GET that makes no progress this long is retried, then fails with EIO; also bounds the wait for a reply; above 0"},
		{name: "retries", group: groupRetry, arg: "N", value: (*intValue)(&c.Read.Retries),
			help: "times a failed GET is sent again; `0`: none"},

		{name: "gpu", group: groupGPU, arg: "MODE", value: &enumValue{&c.GPU.Mode, []string{"auto", "off", "host-standin"}},
			help: "`auto` (CUDA when the driver loads), `off`, or `host-standin` (a test aid: files under `--host-standin-dir` stand in for device memory)"},
		{name: "host-standin-dir", group: groupGPU, arg: "DIR", value: (*stringValue)(&c.GPU.StandinDir), advanced: true,
			help: "directory of the host stand-in buffers, with `--gpu=host-standin`"},
		{name: "host-standin-allow-other", group: groupGPU, value: (*boolValue)(&c.GPU.StandinAllowOther), bare: "true", advanced: true,
			help: "accept `--gpu=host-standin` with `--allow-other`: every user may have the daemon write files of theirs under `--host-standin-dir` (docs/operations.md)"},
		{name: "gpu-prepare", group: groupGPU, value: (*boolValue)(&c.GPU.Prepare), bare: "true", advanced: true,
			help: "ready CUDA and each GPU's staging ring (`--staging-slots` of `--staging-slot-size`, pinned) at start, in the background, so that the first GPU read does not wait for them; `false`: as GPU reads need them"},
		{name: "gpu-share", group: groupGPU, value: (*boolValue)(&c.GPU.Share), bare: "true",
			help: "GPU reads of one object version into one device share its fetch while in flight; for processes loading the same objects", why: benchmarksDoc},
		{name: "gpu-streams", group: groupGPU, arg: "N", value: (*intValue)(&c.GPU.Streams), advanced: true,
			help: "most parallel ranged GETs of one GPU read"},
		{name: "gpu-target-streams", group: groupGPU, arg: "N", value: (*intValue)(&c.GPU.TargetStreams), advanced: true,
			help: "GETs in flight the GPU reads aim for together: each read takes its share, from one GET of its whole range to `--gpu-streams` ranges", why: benchmarksDoc},
		{name: "gpu-part-size", group: groupGPU, arg: "SIZE", value: (*cli.Size)(&c.GPU.PartSize), def: "`0` (parts sized by load)", advanced: true,
			help: "largest range of one GET of a GPU read (0 or at least 1MiB), streamed through the staging slots"},
		{name: "gpu-read-ahead", group: groupGPU, arg: "SIZE", value: (*cli.Size)(&c.GPU.ReadAhead), advanced: true,
			help: "largest window by which an open file's GPU reads in order are read ahead into staging (0: off; else at least 1MiB); a GPU's readahead holds at most half its `--staging-slots`, shared evenly among the files reading ahead on it"},
		{name: "gpu-max-ops", group: groupGPU, arg: "N", value: (*intValue)(&c.GPU.MaxOps), advanced: true,
			help: "server operations of GPU reads in flight, across all callers"},
		{name: "gpu-max-bytes", group: groupGPU, arg: "SIZE", value: (*cli.Size)(&c.GPU.MaxBytes), advanced: true,
			help: "bytes of GPU reads in flight, across all callers"},
		{name: "gpu-raw-gets", group: groupGPU, value: (*notBool)(&c.GPU.ClientGets), bare: "true", advanced: true,
			help: "read GPU reads' GET bodies on connections of their own, many bytes per wake-up, where the endpoint is plain HTTP and no proxy is set; `false`: through the HTTP client", why: benchmarksDoc},
		{name: "staging-slots", group: groupGPU, arg: "N", value: (*intValue)(&c.GPU.Staging.Slots), advanced: true,
			help: "pinned staging slots per GPU at most, pinned 64 MiB at a time: all at start with `--gpu-prepare`, else as GETs need them"},
		{name: "staging-slot-size", group: groupGPU, arg: "SIZE", value: (*intSize)(&c.GPU.Staging.SlotSize), advanced: true,
			help: "bytes per pinned staging slot (64KiB to 1GiB)", why: benchmarksDoc},
		{name: "staging-streams", group: groupGPU, arg: "N", value: (*intValue)(&c.GPU.Staging.Streams), advanced: true,
			help: "device streams per GPU that the staging slots' copies go on (1 to 64)"},
		{name: "rdma", group: groupGPU, arg: "MODE", value: &enumValue{&c.GPU.RDMA, []string{"off", "loopback", "libs3rdma"}},
			help: "RDMA for GPU reads: `off`, `loopback` (an in-process emulation for tests and the demo, never a network) or `libs3rdma`"},
		{name: "rdma-lib", group: groupGPU, arg: "FILE", value: (*stringValue)(&c.GPU.RDMALibrary), def: "the library search path",
			help: "path of `libs3rdma.so`"},
		{name: "rdma-chunk", group: groupGPU, arg: "SIZE", value: (*cli.Size)(&c.GPU.RDMAChunk), advanced: true,
			help: "largest single RDMA transfer (1MiB to 1GiB); a GPU read is cut into transfers as into HTTP parts, by its share of `--gpu-target-streams`, none larger than this"},
		{name: "rdma-decline-is-error", group: groupGPU, value: (*boolValue)(&c.GPU.DeclineIsError), bare: "true", advanced: true,
			help: "fail a GPU read whose RDMA transfer is declined (ECANCELED) instead of reading it over HTTP; a GPU write whose RDMA part is declined fails (ECANCELED) and fails its file"},

		{name: "foreground", group: groupProcess, value: (*boolValue)(&mf.foreground), bare: "true", def: "`true`; `false` in the mount helper form",
			help: "stay in the foreground until SIGINT or SIGTERM, then unmount"},
		{name: "log-level", group: groupProcess, arg: "LEVEL", value: (*stringValue)(&mf.logLevel),
			help: "`debug`, `info`, `warn` or `error`"},
		{name: "log-file", group: groupProcess, arg: "FILE", value: (*stringValue)(&mf.logFile), def: "stderr",
			help: "log to this file instead of stderr"},
		{name: "metrics-addr", group: groupProcess, arg: "ADDR", value: (*addrValue)(&c.Metrics.Addr),
			help: "listen address of Prometheus `/metrics`; `off` disables it"},
		{name: "pprof", group: groupProcess, value: (*boolValue)(&c.Metrics.Pprof), bare: "true", advanced: true,
			help: "also serve Go profiles (`/debug/pprof`) on `--metrics-addr`, to anyone who can connect to it"},
	}
	for i := range opts {
		if opts[i].def == "" {
			opts[i].def = "`" + opts[i].value.String() + "`"
		}
	}
	return opts
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// optionSet finds options by flag and by -o spelling.
type optionSet struct {
	mf    *mountFlags
	list  []option
	flags map[string]*option
	opts  map[string]*option // keys with dashes
	given map[string]bool    // options set by a flag or -o, by name

	// sloppy is mount -s: an unknown -o option is ignored with a
	// warning instead of failing the mount.
	sloppy bool
}

func newOptionSet(mf *mountFlags) *optionSet {
	s := &optionSet{mf: mf, list: mountOptions(mf), flags: map[string]*option{}, opts: map[string]*option{}, given: map[string]bool{}}
	for i := range s.list {
		o := &s.list[i]
		s.flags[o.name] = o
		if o.flagOnly {
			continue
		}
		s.opts[o.name] = o
		for _, a := range o.optAliases {
			s.opts[a] = o
		}
	}
	return s
}

// fieldPaths maps the address of each field of the tree under root to its
// path (GPU.Staging.Slots), as setting.Error names it: embedded structs add
// no name of their own.
func fieldPaths(root any) map[uintptr]string {
	paths := map[uintptr]string{}
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := range t.NumField() {
			f, fv := t.Field(i), v.Field(i)
			if !f.IsExported() {
				continue
			}
			name := prefix + f.Name
			if f.Anonymous {
				name = strings.TrimSuffix(prefix, ".")
			}
			if f.Type.Kind() == reflect.Struct {
				p := name + "."
				if name == "" {
					p = ""
				}
				walk(fv, p)
				continue
			}
			paths[fv.Addr().Pointer()] = name
		}
	}
	walk(reflect.ValueOf(root).Elem(), "")
	return paths
}

// valueAddr is the address of the field an option's value sets.
func valueAddr(v optionValue) uintptr {
	if e, ok := v.(*enumValue); ok {
		return reflect.ValueOf(e.p).Pointer()
	}
	return reflect.ValueOf(v).Pointer()
}

// flagOfField names the flag of each daemon.Config setting an option
// sets, by the setting's path in the tree (Read.ReadTimeout: read-timeout).
var flagOfField = sync.OnceValue(func() map[string]string {
	var mf mountFlags
	names := map[string]string{}
	paths := fieldPaths(&mf.Config)
	for _, o := range mountOptions(&mf) {
		if p, ok := paths[valueAddr(o.value)]; ok {
			names[p] = o.name
		}
		for _, f := range o.fields {
			names[f] = o.name
		}
	}
	return names
})

// named turns a setting the configuration refused (setting.Error, which
// names the field) into the same refusal naming the flag that sets it.
// usage says whether it is a mistake in the command line (exit 2) rather
// than a failure met while mounting.
func named(err error, usage bool) error {
	var se *setting.Error
	if err == nil || !errors.As(err, &se) {
		return err
	}
	text := se.Error()
	if name, ok := flagOfField()[se.Name]; ok {
		text = fmt.Sprintf("--%s %s: %s", name, quoteIfNeeded(se.Value), se.Why)
	}
	if usage {
		return cli.Usagef("%s", text)
	}
	return errors.New(text)
}

// helpFlags print the help (helpAllFlag every flag, the advanced too);
// markdownFlag prints README.md's flag table and markdownAdvancedFlag
// docs/operations.md's (not listed: they keep the docs up to date).
var helpFlags = map[string]bool{"h": true, "help": true, helpAllFlag: true}

const (
	helpAllFlag          = "help-all"
	markdownFlag         = "help-markdown"
	markdownAdvancedFlag = "help-markdown-advanced"
)

// parse reads args: flags (one dash or two, a value after '=' or as the next
// argument), -o LIST (the lists are returned unread, to be applied after
// the flags) and positional arguments, in any order; "--" ends the flags.
// out receives --help.
func (s *optionSet) parse(args []string, out io.Writer) (positional, lists []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(positional, args[i+1:]...), lists, nil
		case a == "-o":
			if i+1 >= len(args) {
				return nil, nil, cli.Usagef("-o needs key=value,... after it")
			}
			i++
			lists = append(lists, args[i])
			continue
		case strings.HasPrefix(a, "-o="):
			lists = append(lists, a[len("-o="):])
			continue
		case len(a) < 2 || a[0] != '-':
			positional = append(positional, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if helpFlags[name] || name == markdownFlag || name == markdownAdvancedFlag {
			switch name {
			case markdownFlag:
				fmt.Fprint(out, s.markdown(false))
			case markdownAdvancedFlag:
				fmt.Fprint(out, s.markdown(true))
			default:
				s.usage(out, name == helpAllFlag)
			}
			return nil, nil, flag.ErrHelp
		}
		o := s.flags[name]
		if o == nil {
			return nil, nil, cli.Usagef("unknown flag %s ('s3gdsfs mount --help' lists them)", a)
		}
		if !hasValue {
			switch {
			case o.bare != "":
				value = o.bare
				if i+1 < len(args) && o.value.(bareValue).accepts(args[i+1]) {
					i++
					value = args[i]
				}
			case i+1 < len(args):
				i++
				value = args[i]
			default:
				return nil, nil, cli.Usagef("--%s needs a value: --%s=%s or --%s %s", o.name, o.name, o.arg, o.name, o.arg)
			}
		}
		if err := o.value.Set(value); err != nil {
			return nil, nil, cli.Usagef("--%s %s: %v", o.name, quoteIfNeeded(value), err)
		}
		s.given[o.name] = true
	}
	return positional, lists, nil
}

// settle sets the defaults that follow other options, once every flag and
// -o list is applied, and refuses values that contradict each other: the
// cache not given is half of --memory-limit (so --memory-limit alone is
// enough); given, it must fit in it.
func (s *optionSet) settle() error {
	mf := s.mf
	if s.given["profile"] && mf.credentialsFile == "" {
		return cli.Usagef("--profile %s: only with --credentials-file (the standard chain takes the profile from $AWS_PROFILE)", mf.profile)
	}
	if !s.given["cache-size"] {
		if s.given["memory-limit"] {
			mf.Core.CacheSize = mf.Core.MemoryLimit / 2
		}
		return nil
	}
	if mf.Core.CacheSize > mf.Core.MemoryLimit {
		limit := "--memory-limit " + cli.FormatSize(mf.Core.MemoryLimit)
		if !s.given["memory-limit"] {
			limit += " (its default)"
		}
		return cli.Usagef("--cache-size %s is larger than %s: the cache is part of the memory limit; lower --cache-size or raise --memory-limit",
			cli.FormatSize(mf.Core.CacheSize), limit)
	}
	return nil
}

// fstabNoise are options mount(8), mount.fuse3 and systemd pass that mean
// nothing here (mount.fuse3 adds dev and suid unless nodev and nosuid are
// given). "rw" is among them because mount(8) adds it by default; the
// mount is read-only whatever it says. Options starting x- or X-
// (x-systemd.automount, x-systemd.requires=...) and comment= are ignored
// too.
var fstabNoise = map[string]bool{
	"defaults": true, "rw": true, "ro": true, "auto": true, "noauto": true, "user": true, "nouser": true,
	"users": true, "owner": true, "group": true, "nofail": true, "_netdev": true, "exec": true, "noexec": true,
	"suid": true, "nosuid": true, "dev": true, "nodev": true, "sync": true, "async": true, "dirsync": true,
	"atime": true, "noatime": true, "relatime": true, "norelatime": true, "strictatime": true,
	"nostrictatime": true, "lazytime": true, "nolazytime": true, "nodiratime": true, "diratime": true,
	"silent": true, "loud": true,
}

// ignoredOption says whether an -o option is one of fstab's and systemd's
// that mean nothing to this filesystem.
func ignoredOption(kv string) bool {
	return kv == "" || fstabNoise[kv] || strings.HasPrefix(kv, "x-") || strings.HasPrefix(kv, "X-") || strings.HasPrefix(kv, "comment=")
}

// splitOptions splits an -o list at its commas, as mount(8) does: a comma
// inside double quotes (comment="a,b") is part of the value.
func splitOptions(list string) ([]string, error) {
	var opts []string
	start, quoted := 0, false
	for i := 0; i < len(list); i++ {
		switch list[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				opts = append(opts, list[start:i])
				start = i + 1
			}
		}
	}
	if quoted {
		return nil, cli.Usagef("-o: a double quote is not closed")
	}
	return append(opts, list[start:]), nil
}

// unquote takes the double quotes off a value written in them.
func unquote(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1]
	}
	return v
}

// applyList applies one -o list: key=value or key alone for an option
// that may stand alone, separated by commas. An unknown option is named
// without its value: a value may be a secret (aws_secret_access_key=),
// and mount errors go to the journal.
func (s *optionSet) applyList(list string) error {
	opts, err := splitOptions(list)
	if err != nil {
		return err
	}
	for _, kv := range opts {
		kv = strings.TrimSpace(kv)
		if ignoredOption(kv) {
			continue
		}
		key, value, hasValue := strings.Cut(kv, "=")
		value = unquote(value)
		o := s.opts[strings.ReplaceAll(key, "_", "-")]
		if o == nil && s.sloppy {
			fmt.Fprintf(os.Stderr, "s3gdsfs: -o %s: unknown option, ignored (mount -s)\n", key)
			continue
		}
		if o == nil {
			return cli.Usagef("-o %s: unknown option (options are the mount flags without dashes, e.g. -o endpoint=https://s3.example.com,bucket=data)", key)
		}
		if !hasValue {
			if o.bare == "" {
				return cli.Usagef("-o %s: needs a value (%s=%s)", key, key, o.arg)
			}
			value = o.bare
		}
		if err := o.value.Set(value); err != nil {
			return cli.Usagef("-o %s=%s: %v", key, value, err)
		}
		s.given[o.name] = true
	}
	return nil
}

func quoteIfNeeded(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\n\"'\\") {
		return strconv.Quote(v)
	}
	return v
}

// The values options set: each is the field it sets, as a type that
// parses and prints it. The field holds the default (daemon.Default).

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

// addrValue is a listen address; "off" (printed for "") turns it off.
type addrValue string

func (v *addrValue) String() string {
	if *v == "" {
		return "off"
	}
	return string(*v)
}

func (v *addrValue) Set(s string) error {
	if s == "off" {
		s = ""
	}
	*v = addrValue(s)
	return nil
}

// enumValue is a string with a fixed set of values.
type enumValue struct {
	p       *string
	choices []string
}

func (v *enumValue) String() string { return *v.p }

func (v *enumValue) Set(s string) error {
	for _, c := range v.choices {
		if s == c {
			*v.p = s
			return nil
		}
	}
	return fmt.Errorf("use %s", orList(v.choices))
}

func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

type boolValue bool

func (v *boolValue) String() string        { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) accepts(s string) bool { _, err := strconv.ParseBool(s); return err == nil }

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("use true or false")
	}
	*v = boolValue(b)
	return nil
}

// notBool is a switch that sets a field to its opposite (--gpu-raw-gets
// is GPU.ClientGets false).
type notBool bool

func (v *notBool) String() string        { return strconv.FormatBool(!bool(*v)) }
func (v *notBool) accepts(s string) bool { _, err := strconv.ParseBool(s); return err == nil }

func (v *notBool) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("use true or false")
	}
	*v = notBool(!b)
	return nil
}

type intValue int

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return fmt.Errorf("not a whole number")
	}
	*v = intValue(n)
	return nil
}

// idValue is a user or group id. The kernel's ids are 32 bits, and
// 4294967295 is (uid_t)-1, which no file may have: a larger number would
// wrap to another user's id.
type idValue uint32

const maxID = 1<<32 - 2

func (v *idValue) String() string { return strconv.FormatUint(uint64(*v), 10) }

func (v *idValue) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > maxID {
		return fmt.Errorf("not an id from 0 to %d", uint64(maxID))
	}
	*v = idValue(n)
	return nil
}

// durationValue prints whole units as they are written (60s, not 1m0s).
type durationValue time.Duration

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a duration (such as 500ms, 30s, 1m)")
	}
	*v = durationValue(d)
	return nil
}

func (v *durationValue) String() string { return formatDuration(time.Duration(*v)) }

func formatDuration(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d != 0 && d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.name
		}
	}
	return d.String()
}

// intSize is a size held in an int field (BlockSize, a slot's size).
type intSize int

func (v *intSize) String() string { return cli.FormatSize(int64(*v)) }

func (v *intSize) Set(s string) error {
	var n cli.Size
	if err := n.Set(s); err != nil {
		return err
	}
	if int64(n) > int64(^uint(0)>>1) {
		return fmt.Errorf("too large")
	}
	*v = intSize(n)
	return nil
}
