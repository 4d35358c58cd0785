package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// An option is one setting of the mount command. mountOptions is the only
// list of them: the flags, the -o options of the mount helper form,
// `s3gdsfs mount --help` and README.md's flag table (--help-markdown) are
// all made from it.
type option struct {
	name  string      // the flag without dashes; -o takes it with dashes or underscores
	group string      // heading it is listed under
	value optionValue // the mountFlags field it sets, holding its default
	arg   string      // what the value is, in the usage line (URL, SIZE); none for a switch
	help  string      // one line: what it does (`code` in backquotes)
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
	groupMemory  = "Memory and prefetching"
	groupStream  = "Whole-object streams and splicing"
	groupKernel  = "Page cache and FUSE"
	groupRetry   = "Timeouts and retries"
	groupGPU     = "GPU reads"
	groupProcess = "Process, log and metrics"
)

const benchmarksDoc = "docs/benchmarks.md"

// mountOptions sets mf to the defaults and returns the options that set
// its fields.
func mountOptions(mf *mountFlags) []option {
	opts := []option{
		{name: "endpoint", group: groupStore, arg: "URL", value: newString(&mf.endpoint, os.Getenv("AWS_ENDPOINT_URL")), def: "`$AWS_ENDPOINT_URL`",
			help: "S3 endpoint, `http(s)://host[:port]`; required"},
		{name: "bucket", group: groupStore, arg: "NAME[/PREFIX]", value: newString(&mf.bucket, ""), def: "every bucket",
			help: "mount one bucket, or a prefix of it; without it every bucket the credentials can list is a directory"},
		{name: "region", group: groupStore, arg: "REGION", value: newString(&mf.region, envOr("AWS_REGION", "us-east-1")), def: "`$AWS_REGION`, else `us-east-1`",
			help: "S3 region"},
		{name: "ca-bundle", group: groupStore, arg: "FILE", value: newString(&mf.caBundle, os.Getenv("AWS_CA_BUNDLE")), def: "`$AWS_CA_BUNDLE`, else none",
			help: "PEM file of CA certificates trusted beside the system store, for https endpoints"},
		{name: "credentials-file", group: groupStore, arg: "FILE", value: newString(&mf.credentialsFile, ""), def: "the standard chain",
			help: "AWS shared-credentials file to take the keys from, for fstab and systemd; mode 0600, owned by the mounting user or root (docs/operations.md)"},
		{name: "profile", group: groupStore, arg: "NAME", value: newString(&mf.profile, envOr("AWS_PROFILE", "default")), def: "`$AWS_PROFILE`, else `default`",
			help: "profile of `--credentials-file` to read"},
		{name: "virtual-host", group: groupStore, value: newBool(&mf.virtualHost, false), bare: "true",
			help: "virtual-hosted-style addressing (`bucket.host`) instead of path-style"},

		{name: "uid", group: groupFiles, arg: "UID", value: newUint(&mf.uid, uint(os.Getuid())), def: "the caller's",
			help: "owner of every file and directory"},
		{name: "gid", group: groupFiles, arg: "GID", value: newUint(&mf.gid, uint(os.Getgid())), def: "the caller's",
			help: "group of every file and directory"},
		{name: "file-mode", group: groupFiles, arg: "MODE", value: newMode(&mf.fileMode, 0o444),
			help: "permission bits of files, in octal"},
		{name: "dir-mode", group: groupFiles, arg: "MODE", value: newMode(&mf.dirMode, 0o555),
			help: "permission bits of directories, in octal"},
		{name: "allow-other", group: groupFiles, value: newBool(&mf.allowOther, false), bare: "true",
			help: "let other users use the mount; the modes still apply (docs/operations.md)"},
		{name: "meta-ttl", group: groupFiles, arg: "DURATION", value: newDuration(&mf.metaTTL, vfs.DefaultMetaTTL),
			help: "how long names and sizes are cached"},
		{name: "negative-ttl", group: groupFiles, arg: "DURATION", value: newDuration(&mf.negativeTTL, vfs.DefaultNegativeTTL),
			help: "how long a missing name is cached"},

		{name: "memory-limit", group: groupMemory, arg: "SIZE", value: newSize(&mf.memoryLimit, vfs.DefaultMemoryLimit),
			help: "all block memory: prefetch buffers and cache"},
		{name: "cache-size", group: groupMemory, arg: "SIZE", value: newSize(&mf.cacheSize, vfs.DefaultCacheSize),
			def:  "`" + formatSize(vfs.DefaultCacheSize) + "`, half of `--memory-limit`",
			help: "block cache (blocks already read), part of `--memory-limit`; not given, half of it; `0`: none"},
		{name: "block-size", group: groupMemory, arg: "SIZE", value: newSize(&mf.blockSize, vfs.DefaultBlockSize),
			help: "unit of caching and of random reads"},
		{name: "part-size", group: groupMemory, arg: "SIZE", value: newSize(&mf.partSize, vfs.DefaultPartSize),
			help: "bytes per ranged GET of a sequential reader"},
		{name: "initial-window", group: groupMemory, arg: "SIZE", value: newSize(&mf.initialWindow, vfs.DefaultInitialWindow),
			help: "first prefetch window of a sequential reader; it doubles up to `--max-window`"},
		{name: "max-window", group: groupMemory, arg: "SIZE", value: newSize(&mf.maxWindow, vfs.DefaultMaxWindow),
			help: "largest prefetch window per open file"},

		{name: "stream", group: groupStream, arg: "WHEN", value: newPolicy(&mf.stream, "auto"), bare: "always",
			help: "one GET of the whole object feeds a reader that starts at an object's beginning: `auto` when the endpoint is on this host or a private network, " +
				"`always` (the flag alone) or `never` (ranged GETs only)"},
		{name: "stream-min-rate", group: groupStream, arg: "SIZE", value: newSize(&mf.streamMinRate, vfs.DefaultStreamMinRate),
			help: "bytes per second a stream must deliver while it is read, or ranged GETs take over; `0`: never"},
		{name: "stream-idle", group: groupStream, arg: "DURATION", value: newDuration(&mf.streamIdle, vfs.DefaultStreamIdle),
			help: "close a stream that had nothing to read this long"},
		{name: "splice", group: groupStream, arg: "WHEN", value: newPolicy(&mf.splice, "auto"), bare: "always", why: benchmarksDoc,
			help: "feed a direct-I/O reader straight from its stream's socket with `splice(2)`: `auto` over http, `always` (the flag alone; else the mount fails) or `never`"},

		{name: "direct-io", group: groupKernel, arg: "WHEN", value: newDirectIO(&mf.directIO, vfs.DirectIOAuto), bare: "always",
			help: "page cache policy: `auto` (objects of at least `--direct-io-min-size` bypass the page cache, smaller ones use it), `always` (the flag alone) or `never`"},
		{name: "direct-io-min-size", group: groupKernel, arg: "SIZE", value: newSize(&mf.directIOMinSize, vfs.DefaultDirectIOMinSize),
			help: "the smallest object `--direct-io=auto` reads with direct I/O"},
		{name: "read-ahead", group: groupKernel, arg: "SIZE", value: newSize(&mf.readAhead, daemon.DefaultReadAhead),
			help: "kernel readahead for the mount (`0` keeps the kernel's 128KiB; needs root)"},
		{name: "fuse-poll", group: groupKernel, arg: "DURATION", value: newDuration(&mf.fusePoll, defaultFusePoll()), def: "`1ms` with 8 CPUs or more, else `0`", why: benchmarksDoc,
			help: "how long a thread that has just replied polls `/dev/fuse` for the next request before it sleeps, at most " +
				formatDuration(maxFusePoll) + "; it also fills a spliced reader's next reply ahead; `0`: none"},
		{name: "debug-fuse", group: groupKernel, value: newBool(&mf.debugFUSE, false), bare: "true", optAliases: []string{"debug"},
			help: "log every FUSE request"},

		{name: "connect-timeout", group: groupRetry, arg: "DURATION", value: newDuration(&mf.connectTimeout, 5*time.Second),
			help: "bound on connecting to the endpoint"},
		{name: "read-timeout", group: groupRetry, arg: "DURATION", value: newDuration(&mf.readTimeout, vfs.DefaultReadTimeout),
			help: "a GET that makes no progress this long is retried, then fails with EIO; also bounds the wait for a reply"},
		{name: "retries", group: groupRetry, arg: "N", value: newInt(&mf.retries, vfs.DefaultRetries),
			help: "times a failed ranged GET is sent again; `0`: none"},

		{name: "gpu", group: groupGPU, arg: "MODE", value: newEnum(&mf.gpu, "auto", "auto", "off", "host-standin"),
			help: "`auto` (CUDA when the driver loads), `off`, or `host-standin` (a test aid: files under `--host-standin-dir` stand in for device memory)"},
		{name: "host-standin-dir", group: groupGPU, arg: "DIR", value: newString(&mf.standinDir, "/dev/shm"),
			help: "directory of the host stand-in buffers, with `--gpu=host-standin`"},
		{name: "host-standin-allow-other", group: groupGPU, value: newBool(&mf.standinAllowOther, false), bare: "true",
			help: "accept `--gpu=host-standin` with `--allow-other`: every user may have the daemon write files of theirs under `--host-standin-dir` (docs/operations.md)"},
		{name: "gpu-streams", group: groupGPU, arg: "N", value: newInt(&mf.gpuStreams, daemon.DefaultGPUStreams),
			help: "most parallel ranged GETs of one GPU read"},
		{name: "gpu-target-streams", group: groupGPU, arg: "N", value: newInt(&mf.gpuTargetStreams, daemon.DefaultGPUTargetStreams),
			help: "GETs in flight the GPU reads aim for together: each read takes its share, from one GET of its whole range to `--gpu-streams` ranges", why: benchmarksDoc},
		{name: "gpu-part-size", group: groupGPU, arg: "SIZE", value: newSize(&mf.gpuPart, 0), def: "`0` (parts sized by load)",
			help: "largest range of one GET of a GPU read (0 or at least 1MiB), streamed through the staging slots"},
		{name: "gpu-max-ops", group: groupGPU, arg: "N", value: newInt(&mf.gpuOps, daemon.DefaultGPUMaxOps),
			help: "server operations of GPU reads in flight, across all callers"},
		{name: "gpu-max-bytes", group: groupGPU, arg: "SIZE", value: newSize(&mf.gpuBytes, daemon.DefaultGPUMaxBytes),
			help: "bytes of GPU reads in flight, across all callers"},
		{name: "gpu-share", group: groupGPU, value: newBool(&mf.gpuShare, false), bare: "true",
			help: "GPU reads of one object version into one device share its fetch while in flight; for processes loading the same objects", why: benchmarksDoc},
		{name: "gpu-raw-gets", group: groupGPU, value: newBool(&mf.gpuRawGets, true), bare: "true",
			help: "read GPU reads' GET bodies on connections of their own, many bytes per wake-up, where the endpoint is plain HTTP and no proxy is set; `false`: through the HTTP client", why: benchmarksDoc},
		{name: "staging-slots", group: groupGPU, arg: "N", value: newInt(&mf.stagingSlots, daemon.DefaultStagingSlots),
			help: "pinned staging slots per GPU at most, pinned 64 MiB at a time as GETs need them"},
		{name: "staging-slot-size", group: groupGPU, arg: "SIZE", value: newSize(&mf.stagingSlotSize, daemon.DefaultStagingSlotSize),
			help: "bytes per pinned staging slot (64KiB to 1GiB)", why: benchmarksDoc},
		{name: "staging-per-copier", group: groupGPU, arg: "N", value: newInt(&mf.stagingPerCopier, daemon.DefaultStagingPerCopier),
			help: "`0`: one pool of slots for every GET, the slot freed last taken first; N: N slots of each GET's own, taken back as their copies complete", why: benchmarksDoc},
		{name: "staging-streams", group: groupGPU, arg: "N", value: newInt(&mf.stagingStreams, daemon.DefaultStagingStreams),
			help: "device streams per GPU that the staging slots' copies go on (1 to 64)"},
		{name: "rdma", group: groupGPU, arg: "MODE", value: newEnum(&mf.rdma, "off", "off", "loopback", "libs3rdma"),
			help: "RDMA for GPU reads: `off`, `loopback` (an in-process emulation for tests and the demo, never a network) or `libs3rdma`"},
		{name: "rdma-lib", group: groupGPU, arg: "FILE", value: newString(&mf.rdmaLib, ""), def: "the library search path",
			help: "path of `libs3rdma.so`"},
		{name: "rdma-chunk", group: groupGPU, arg: "SIZE", value: newSize(&mf.rdmaChunk, daemon.DefaultRDMAChunk),
			help: "largest single RDMA transfer (1MiB to 1GiB); a GPU read is cut into transfers as into HTTP parts, by its share of `--gpu-target-streams`, none larger than this"},
		{name: "rdma-decline-is-error", group: groupGPU, value: newBool(&mf.declineIsError, false), bare: "true",
			help: "fail a GPU read whose RDMA transfer is declined (ECANCELED) instead of reading it over HTTP"},

		{name: "foreground", group: groupProcess, value: newBool(&mf.foreground, true), bare: "true", def: "`true`; `false` in the mount helper form",
			help: "stay in the foreground until SIGINT or SIGTERM, then unmount"},
		{name: "log-level", group: groupProcess, arg: "LEVEL", value: newString(&mf.logLevel, "info"),
			help: "`debug`, `info`, `warn` or `error`"},
		{name: "log-file", group: groupProcess, arg: "FILE", value: newString(&mf.logFile, ""), def: "stderr",
			help: "log to this file instead of stderr"},
		{name: "metrics-addr", group: groupProcess, arg: "ADDR", value: newString(&mf.metricsAddr, daemon.DefaultMetricsAddr),
			help: "listen address of Prometheus `/metrics` (and `/debug/pprof`); `off` disables it"},
	}
	for i := range opts {
		if opts[i].def == "" {
			opts[i].def = "`" + opts[i].value.String() + "`"
		}
	}
	return opts
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

// helpFlags print the help; markdownFlag prints README.md's flag table
// (not listed: it is for keeping the README up to date).
var helpFlags = map[string]bool{"h": true, "help": true}

const markdownFlag = "help-markdown"

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
				return nil, nil, usagef("-o needs key=value,... after it")
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
		if helpFlags[name] || name == markdownFlag {
			if name == markdownFlag {
				fmt.Fprint(out, s.markdown())
			} else {
				s.usage(out)
			}
			return nil, nil, flag.ErrHelp
		}
		o := s.flags[name]
		if o == nil {
			return nil, nil, usagef("unknown flag %s ('s3gdsfs mount --help' lists them)", a)
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
				return nil, nil, usagef("--%s needs a value: --%s=%s or --%s %s", o.name, o.name, o.arg, o.name, o.arg)
			}
		}
		if err := o.value.Set(value); err != nil {
			return nil, nil, usagef("--%s %s: %v", o.name, quoteIfNeeded(value), err)
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
	if mf.gpu == "host-standin" && mf.allowOther && !mf.standinAllowOther {
		return usagef("--gpu=host-standin with --allow-other lets every user have the daemon write files under --host-standin-dir (%s): add --host-standin-allow-other to accept that", mf.standinDir)
	}
	if s.given["profile"] && mf.credentialsFile == "" {
		return usagef("--profile %s: only with --credentials-file (the standard chain takes the profile from $AWS_PROFILE)", mf.profile)
	}
	if !s.given["cache-size"] {
		if s.given["memory-limit"] {
			mf.cacheSize = mf.memoryLimit / 2
		}
		return nil
	}
	if mf.cacheSize > mf.memoryLimit {
		limit := "--memory-limit " + mf.memoryLimit.String()
		if !s.given["memory-limit"] {
			limit += " (its default)"
		}
		return usagef("--cache-size %s is larger than %s: the cache is part of the memory limit; lower --cache-size or raise --memory-limit",
			mf.cacheSize.String(), limit)
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

// applyList applies one -o list: key=value or key alone for an option
// that may stand alone, separated by commas.
func (s *optionSet) applyList(list string) error {
	for _, kv := range strings.Split(list, ",") {
		kv = strings.TrimSpace(kv)
		if ignoredOption(kv) {
			continue
		}
		key, value, hasValue := strings.Cut(kv, "=")
		o := s.opts[strings.ReplaceAll(key, "_", "-")]
		if o == nil && s.sloppy {
			fmt.Fprintf(os.Stderr, "s3gdsfs: -o %s: unknown option, ignored (mount -s)\n", kv)
			continue
		}
		if o == nil {
			return usagef("-o %s: unknown option (options are the mount flags without dashes, e.g. -o endpoint=https://s3.example.com,bucket=data)", kv)
		}
		if !hasValue {
			if o.bare == "" {
				return usagef("-o %s: needs a value (%s=%s)", key, key, o.arg)
			}
			value = o.bare
		}
		if err := o.value.Set(value); err != nil {
			return usagef("-o %s: %v", kv, err)
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

// The values options set. Each constructor sets the field to its default.

type stringValue string

func newString(p *string, def string) *stringValue { *p = def; return (*stringValue)(p) }
func (v *stringValue) Set(s string) error          { *v = stringValue(s); return nil }
func (v *stringValue) String() string              { return string(*v) }

// enumValue is a string with a fixed set of values.
type enumValue struct {
	p       *string
	choices []string
}

func newEnum(p *string, def string, choices ...string) *enumValue {
	*p = def
	return &enumValue{p, choices}
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

func newBool(p *bool, def bool) *boolValue { *p = def; return (*boolValue)(p) }
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

type intValue int

func newInt(p *int, def int) *intValue { *p = def; return (*intValue)(p) }
func (v *intValue) String() string     { return strconv.Itoa(int(*v)) }

func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return fmt.Errorf("not a whole number")
	}
	*v = intValue(n)
	return nil
}

type uintValue uint

func newUint(p *uint, def uint) *uintValue { *p = def; return (*uintValue)(p) }
func (v *uintValue) String() string        { return strconv.FormatUint(uint64(*v), 10) }

func (v *uintValue) Set(s string) error {
	n, err := strconv.ParseUint(s, 0, strconv.IntSize)
	if err != nil {
		return fmt.Errorf("not a whole number of 0 or more")
	}
	*v = uintValue(n)
	return nil
}

// durationValue prints whole units as they are written (60s, not 1m0s).
type durationValue time.Duration

func newDuration(p *time.Duration, def time.Duration) *durationValue {
	*p = def
	return (*durationValue)(p)
}

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

func newSize(p *sizeFlag, def int64) *sizeFlag { *p = sizeFlag(def); return p }

func newMode(p *modeFlag, def uint32) *modeFlag { *p = modeFlag(def); return p }

func newPolicy(p *policyFlag, def string) *policyFlag { *p = policyFlag(def); return p }

func newDirectIO(p *directIOFlag, def vfs.DirectIO) *directIOFlag { *p = directIOFlag(def); return p }
