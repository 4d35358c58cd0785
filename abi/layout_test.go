package abi

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// wireLayout is the table of docs/ioctl.md: each member of struct s3gds_read,
// the ReadRequest field that holds it, its offset and its width. The tests
// below hold the Go struct, Encode and the C header to it.
var wireLayout = []struct {
	c, goName    string
	offset, size int
}{
	{"size", "Size", 0, 4},
	{"version", "Version", 4, 4},
	{"flags", "Flags", 8, 4},
	{"device", "Device", 12, 4},
	{"offset", "Offset", 16, 8},
	{"length", "Length", 24, 8},
	{"dst_offset", "DstOffset", 32, 8},
	{"ipc_handle", "IPCHandle", 40, 64},
	{"rdma_token", "RDMAToken", 104, 96},
	{"bytes", "Bytes", 200, 8},
	{"elapsed_ns", "ElapsedNs", 208, 8},
	{"transport", "Transport", 216, 4},
	{"decline", "Decline", 220, 4},
	{"rdma_bytes", "RDMABytes", 224, 8},
	{"http_bytes", "HTTPBytes", 232, 8},
	{"reserved", "Reserved", 240, 16},
}

func TestLayoutMatchesStruct(t *testing.T) {
	typ := reflect.TypeFor[ReadRequest]()
	if typ.Size() != Size {
		t.Fatalf("ReadRequest is %d bytes in memory, want %d", typ.Size(), Size)
	}
	if typ.NumField() != len(wireLayout) {
		t.Fatalf("ReadRequest has %d fields, the table %d", typ.NumField(), len(wireLayout))
	}
	end := 0
	for i, want := range wireLayout {
		f := typ.Field(i)
		if f.Name != want.goName || int(f.Offset) != want.offset || int(f.Type.Size()) != want.size {
			t.Errorf("field %d is %s at %d, %d bytes; want %s at %d, %d bytes",
				i, f.Name, f.Offset, f.Type.Size(), want.goName, want.offset, want.size)
		}
		if want.offset != end {
			t.Errorf("%s starts at %d, the previous field ends at %d: the wire has no padding", want.c, want.offset, end)
		}
		end = want.offset + want.size
	}
	if end != Size {
		t.Errorf("the table ends at %d, want %d", end, Size)
	}
}

// TestLayoutMatchesEncode sets one field at a time to all ones and checks
// that Encode puts ones exactly at the table's bytes, and that
// UnmarshalBinary reads them back into the same field.
func TestLayoutMatchesEncode(t *testing.T) {
	for i, f := range wireLayout {
		var r ReadRequest
		setAllOnes(reflect.ValueOf(&r).Elem().Field(i))
		buf := r.Encode()
		for j, b := range buf {
			inField := j >= f.offset && j < f.offset+f.size
			if inField && b != 0xff || !inField && b != 0 {
				t.Errorf("%s set alone: Encode byte %d is %#x", f.c, j, b)
				break
			}
		}
		var back ReadRequest
		if err := back.UnmarshalBinary(buf); err != nil {
			t.Fatal(err)
		}
		if back != r {
			t.Errorf("%s set alone: UnmarshalBinary gave %+v", f.c, back)
		}
	}
}

func setAllOnes(v reflect.Value) {
	switch v.Kind() {
	case reflect.Uint32, reflect.Uint64, reflect.Uint8:
		v.SetUint(^uint64(0) >> (64 - 8*v.Type().Size()))
	case reflect.Int32:
		v.SetInt(-1)
	case reflect.Array:
		for i := range v.Len() {
			setAllOnes(v.Index(i))
		}
	default:
		panic("unexpected kind " + v.Kind().String())
	}
}

// TestCHeaderMatchesGo compiles a program against client/c/s3gds.h that prints
// the layout and the constants as the C compiler sees them, and compares each
// with the Go definitions.
func TestCHeaderMatchesGo(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed")
	}
	headerDir, err := filepath.Abs(filepath.Join("..", "client", "c"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "layout.c")
	if err := os.WriteFile(src, []byte(cLayoutProgram()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "layout")
	compile := exec.Command(gcc, "-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I", headerDir, "-o", bin, src)
	if out, err := compile.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("running the layout program: %v", err)
	}

	got := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		key, value, _ := strings.Cut(sc.Text(), "=")
		got[key] = value
	}
	want := goLayoutFacts()
	for key, w := range want {
		if g, ok := got[key]; !ok {
			t.Errorf("C program printed nothing for %s", key)
		} else if g != w {
			t.Errorf("%s: C says %s, Go says %s", key, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("C printed %d facts, Go has %d", len(got), len(want))
	}
}

// TestCHeaderCompilesAsCPlusPlus: PyTorch extensions are C++.
func TestCHeaderCompilesAsCPlusPlus(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ is not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "use.cc")
	prog := "#include \"s3gds.h\"\nint main() { struct s3gds_read r; s3gds_read_init(&r); return r.size == 256 ? 0 : 1; }\n"
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "use")
	cmd := exec.Command(gxx, "-std=c++11", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I", filepath.Join("..", "client", "c"), "-o", bin, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	if err := exec.Command(bin).Run(); err != nil {
		t.Fatalf("s3gds_read_init did not set size: %v", err)
	}
}

// goLayoutFacts is what the C program must print, from the Go side.
func goLayoutFacts() map[string]string {
	facts := map[string]string{
		"sizeof":            strconv.Itoa(Size),
		"S3GDS_IOC_READ":    strconv.FormatUint(uint64(IocRead), 10),
		"S3GDS_IOC_WRITE":   strconv.FormatUint(uint64(IocWrite), 10),
		"S3GDS_ABI_VERSION": strconv.Itoa(Version),
	}
	for _, f := range wireLayout {
		facts["offsetof."+f.c] = strconv.Itoa(f.offset)
		facts["sizeof."+f.c] = strconv.Itoa(f.size)
	}
	for _, f := range flagNames {
		facts["S3GDS_F_"+strings.ToUpper(f.name)] = strconv.FormatUint(uint64(f.flag), 10)
	}
	for t := range Transport(len(transportNames)) {
		facts["S3GDS_TRANSPORT_"+strings.ToUpper(t.String())] = fmt.Sprintf("%d %s", t, t)
	}
	for d := range Decline(len(declineNames)) {
		facts["S3GDS_DECLINE_"+strings.ToUpper(d.String())] = fmt.Sprintf("%d %s", d, d)
	}
	// The header must know no reason or transport beyond Go's.
	facts["s3gds_transport_name.next"] = "unknown"
	facts["s3gds_decline_name.next"] = "unknown"
	facts["S3GDS_XATTR_CAPS"] = XattrCaps
	facts["S3GDS_XATTR_ETAG"] = XattrETag
	facts["S3GDS_XATTR_STATS"] = XattrStats
	return facts
}

// cLayoutProgram prints key=value lines with the keys of goLayoutFacts. The
// constant names come from the Go names, so a constant missing from the
// header fails the compile.
func cLayoutProgram() string {
	var b strings.Builder
	b.WriteString("#include <stdio.h>\n#include \"s3gds.h\"\n\nint main(void)\n{\n")
	b.WriteString("\tprintf(\"sizeof=%zu\\n\", sizeof(struct s3gds_read));\n")
	b.WriteString("\tprintf(\"S3GDS_IOC_READ=%lu\\n\", (unsigned long)S3GDS_IOC_READ);\n")
	b.WriteString("\tprintf(\"S3GDS_IOC_WRITE=%lu\\n\", (unsigned long)S3GDS_IOC_WRITE);\n")
	b.WriteString("\tprintf(\"S3GDS_ABI_VERSION=%d\\n\", S3GDS_ABI_VERSION);\n")
	for _, f := range wireLayout {
		fmt.Fprintf(&b, "\tprintf(\"offsetof.%[1]s=%%zu\\n\", offsetof(struct s3gds_read, %[1]s));\n", f.c)
		fmt.Fprintf(&b, "\tprintf(\"sizeof.%[1]s=%%zu\\n\", sizeof(((struct s3gds_read *)0)->%[1]s));\n", f.c)
	}
	for _, f := range flagNames {
		fmt.Fprintf(&b, "\tprintf(\"S3GDS_F_%[1]s=%%u\\n\", S3GDS_F_%[1]s);\n", strings.ToUpper(f.name))
	}
	for t := range Transport(len(transportNames)) {
		fmt.Fprintf(&b, "\tprintf(\"S3GDS_TRANSPORT_%[1]s=%%d %%s\\n\", (int)S3GDS_TRANSPORT_%[1]s, s3gds_transport_name(S3GDS_TRANSPORT_%[1]s));\n", strings.ToUpper(t.String()))
	}
	for d := range Decline(len(declineNames)) {
		fmt.Fprintf(&b, "\tprintf(\"S3GDS_DECLINE_%[1]s=%%d %%s\\n\", (int)S3GDS_DECLINE_%[1]s, s3gds_decline_name(S3GDS_DECLINE_%[1]s));\n", strings.ToUpper(d.String()))
	}
	fmt.Fprintf(&b, "\tprintf(\"s3gds_transport_name.next=%%s\\n\", s3gds_transport_name(%d));\n", len(transportNames))
	fmt.Fprintf(&b, "\tprintf(\"s3gds_decline_name.next=%%s\\n\", s3gds_decline_name(%d));\n", len(declineNames))
	for _, name := range []string{"CAPS", "ETAG", "STATS"} {
		fmt.Fprintf(&b, "\tprintf(\"S3GDS_XATTR_%[1]s=%%s\\n\", S3GDS_XATTR_%[1]s);\n", name)
	}
	b.WriteString("\treturn 0;\n}\n")
	return b.String()
}
