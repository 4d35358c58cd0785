package main

import (
	"net"
	"os"
)

// sdNotify sends state to systemd's notification socket ($NOTIFY_SOCKET,
// set for a unit of Type=notify; "@..." is an abstract socket, which Go
// reads as such): READY=1 once the mount answers, STOPPING=1 when a
// signal asks it to go. Without the variable it does nothing.
func sdNotify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
