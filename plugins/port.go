package plugins

import (
	"fmt"
	"net"
	"strconv"
)

// CheckPortFree reports whether a model server could listen on
// 127.0.0.1:port right now, by binding that address and closing it at once:
// nil means the port was free at that moment; otherwise the error says why
// (typically "address already in use": another process listens there, on
// 127.0.0.1 or on every address). A port outside 1..65535 is an error.
//
// It is the one rule for "this port may be handed to a model server": the
// host applies it when it assigns ${PORT} (skipping taken ports) and the cmd
// backend applies it again just before it launches a server on a port the
// host gave it, so a server never starts on a port someone else answers on:
// it moves the server to a free port where it can (cmdbackend.Backend.Start).
func CheckPortFree(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d is out of range (1-65535)", port)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("port %d is taken: %w", port, err)
	}
	return l.Close()
}
