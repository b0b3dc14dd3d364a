package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// llama-swap's command line reads flags with Go's flag package, one dash
// or two: after `loadout serve` it means what it means there.
func TestOneDashLongFlags(t *testing.T) {
	for _, tt := range []struct{ in, want []string }{
		{[]string{"serve", "-config", "c.yaml", "-listen=:8080", "-watch-config"},
			[]string{"serve", "--config", "c.yaml", "--listen=:8080", "--watch-config"}},
		{[]string{"serve", "-config-dir", "d", "-tls-cert-file", "c.pem", "-tls-key-file", "k.pem"},
			[]string{"serve", "--config-dir", "d", "--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"}},
		// Shorthands, two dashes, words that name no flag, and what follows
		// "--" stay as they are.
		{[]string{"serve", "-c", "c.yaml", "--listen", ":1", "-bogus"}, []string{"serve", "-c", "c.yaml", "--listen", ":1", "-bogus"}},
		{[]string{"config", "check", "-config-dir", "d", "--", "-listen"}, []string{"config", "check", "--config-dir", "d", "--", "-listen"}},
		{[]string{"-version"}, []string{"--version"}},
		{[]string{"serve", "-version"}, []string{"serve", "--version"}}, // llama-swap -version
		{[]string{"-help"}, []string{"--help"}},
	} {
		if got := oneDashLongFlags(newRootCmd(), tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("oneDashLongFlags(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	root := newRootCmd()
	if !servesFlags(root, []string{"--config", "c.yaml"}) || !servesFlags(root, []string{"-listen", ":1"}) {
		t.Error("serve's flags given to no command are not told apart")
	}
	if servesFlags(root, []string{"--version"}) || servesFlags(root, []string{"serve", "--config", "c.yaml"}) {
		t.Error("a root flag or serve's own command line is taken for serve's flags given to no command")
	}
}

// A llama-swap deployment's command line runs unchanged after `loadout
// serve`: one-dash flags, a configuration split between -config and
// -config-dir, and -watch-config seeing files added to and removed from
// the directory; a file that defines a model twice is refused and the
// running configuration kept.
func TestServe_LlamaSwapCommandLine(t *testing.T) {
	dir := t.TempDir()
	confDir := filepath.Join(dir, "conf.d")
	if err := os.Mkdir(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	model := func(id string) string {
		return "models:\n  " + id + ":\n    backend: sim\n    options: {load_time: 20ms, tokens_per_second: 400}\n"
	}
	main := writeConfig(t, dir, "healthCheckTimeout: 30\n"+model("a")+"groups:\n  all: {swap: false, members: [a, b]}\n")
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(confDir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10-b.yaml", "healthCheckTimeout: 30\n"+model("b"))
	s := startServer(t, "", "-config", main, "-config-dir", confDir, "-watch-config")
	s.awaitWatch(t)
	listed := func() []string {
		_, body := s.get("/v1/models")
		var ids []string
		for _, id := range []string{"a", "b", "c"} {
			if strings.Contains(body, `"id":"`+id+`"`) {
				ids = append(ids, id)
			}
		}
		return ids
	}
	if got := listed(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("models listed %v, want a b", got)
	}
	s.mustChat("b")

	// A file added to the directory is a reload that adds its model.
	write("20-c.yaml", "groups:\n  c-alone: {members: [c]}\n"+model("c"))
	eventually(t, "model c after its file was added", func() bool { return slices.Contains(listed(), "c") })
	s.mustChat("c")

	// A file removed takes its model away (b is in a group of the main
	// file: the group goes with it or the reload is refused, so the
	// group is rewritten first).
	if err := os.WriteFile(main, []byte("healthCheckTimeout: 30\n"+model("a")), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the main file's reload", func() bool { return strings.Count(s.log(), "msg=reloaded") >= 2 })
	if err := os.Remove(filepath.Join(confDir, "10-b.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "model b gone after its file was removed", func() bool { return !slices.Contains(listed(), "b") })

	// A file that defines a model again is refused, naming both places.
	write("30-dup.yaml", model("a"))
	eventually(t, "the refused reload", func() bool { return strings.Contains(s.log(), `msg="reload refused`) })
	if lg := s.log(); !strings.Contains(lg, "30-dup.yaml:2:3: models.a: already defined at") {
		t.Fatalf("the refusal does not name the file and the first definition:\n%s", lg)
	}
	if got := listed(); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("after the refused reload: models %v, want a c", got)
	}
	s.mustChat("a")
}

// --tls-cert-file and --tls-key-file serve HTTPS (llama-swap's flags):
// a client that trusts the certificate is served, a plain HTTP request
// is refused, and the start-up line's UI address is https.
func TestServe_TLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	s := startServer(t, "", "--tls-cert-file", certFile, "--tls-key-file", keyFile)
	addr := strings.TrimPrefix(s.base, "http://")
	if !strings.Contains(s.log(), "ui=https://"+addr+"/ui/") {
		t.Errorf("the start-up line's UI address is not https://%s/ui/:\n%s", addr, s.log())
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	resp, err := c.Post("https://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(chat("small", false)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat over HTTPS: %d", resp.StatusCode)
	}
	resp, err = http.Get("http://" + addr + "/v1/models")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the HTTPS listener: %d, want 400", resp.StatusCode)
		}
	}
}

// The TLS flags go together and must load: a clear error before
// anything starts.
func TestLoadTLS_Errors(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, dir)
	if c, err := loadTLS("", ""); c != nil || err != nil {
		t.Errorf("no flags: %v, %v; want plain HTTP", c, err)
	}
	if _, err := loadTLS(certFile, ""); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Errorf("a certificate without a key: %v", err)
	}
	if _, err := loadTLS(certFile, filepath.Join(dir, "missing.pem")); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("a missing key file: %v", err)
	}
	if _, err := loadTLS(keyFile, certFile); err == nil {
		t.Error("the files swapped load")
	}
	if c, err := loadTLS(certFile, keyFile); err != nil || len(c.Certificates) != 1 {
		t.Errorf("a good pair: %v", err)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// to dir, and returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "loadout test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
