// Package setting is how a configuration refuses a value: the error names
// the setting by its place in the configuration tree (GPU.Staging.Slots),
// so that the command can name it as its flag (--staging-slots), and the
// packages that check their own part of the tree never quote flags.
package setting

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"
)

// Error refuses the value of one setting.
type Error struct {
	// Name is the setting's path in the configuration ("BlockSize"; a
	// configuration that holds another's part prefixes it: "Core.BlockSize").
	Name string
	// Value is the refused value as the configuration holds it.
	Value string
	// Why says what is wanted, in words that name no flag.
	Why string
}

func (e *Error) Error() string { return e.Name + " " + e.Value + ": " + e.Why }

// Errno: a refused setting is an invalid argument.
func (e *Error) Errno() syscall.Errno { return syscall.EINVAL }

// Refuse is the error for name holding value.
func Refuse(name string, value any, why string, args ...any) *Error {
	return &Error{Name: name, Value: fmt.Sprint(value), Why: fmt.Sprintf(why, args...)}
}

// RefuseSize is Refuse for a size in bytes, written as the command's flags
// write sizes.
func RefuseSize(name string, bytes int64, why string, args ...any) *Error {
	return &Error{Name: name, Value: Size(bytes), Why: fmt.Sprintf(why, args...)}
}

// Within prefixes the name of a setting refused by a part of a larger
// configuration with the part's name; other errors pass unchanged.
func Within(part string, err error) error {
	var se *Error
	if errors.As(err, &se) {
		c := *se
		c.Name = part + "." + c.Name
		return &c
	}
	return err
}

// Size writes n bytes in the largest binary unit that divides it
// (64MiB, 1536KiB, 100).
func Size(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}
