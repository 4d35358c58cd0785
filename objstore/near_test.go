package objstore

import "testing"

func TestNearEndpoint(t *testing.T) {
	for endpoint, want := range map[string]bool{
		"http://127.0.0.1:7070":        true,
		"http://[::1]:9000":            true,
		"https://10.1.2.3":             true,
		"http://192.168.0.10:9000":     true,
		"http://172.16.5.4":            true,
		"http://169.254.1.1":           true,
		"https://[fd00::5]:443":        true,
		"http://[::ffff:10.0.0.1]":     true,
		"http://localhost:9000":        true,
		"https://52.216.0.1":           false,
		"https://[2600:1f18::1]":       false,
		"http://172.32.0.1":            false,
		"https://no-such-host.invalid": false,
		"not a url":                    false,
		"":                             false,
	} {
		if got := NearEndpoint(endpoint); got != want {
			t.Errorf("NearEndpoint(%q) = %v, want %v", endpoint, got, want)
		}
	}
}
