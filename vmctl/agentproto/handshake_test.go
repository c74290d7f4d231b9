package agentproto

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

func TestHandshake(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	defer guest.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := AcceptHello(bufio.NewReader(guest), guest, "v1.2.3")
		errc <- err
	}()
	nonce, err := NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	if len(nonce) != 32 || !validToken(nonce) {
		t.Fatalf("nonce %q", nonce)
	}
	ver, err := ClientHandshake(bufio.NewReader(host), host, nonce)
	if err != nil || ver != "v1.2.3" {
		t.Fatalf("ClientHandshake = %q, %v", ver, err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("AcceptHello: %v", err)
	}
}

func TestAcceptHelloSkipsStaleBytes(t *testing.T) {
	in := "\x00\x01yamux junk AGENTBOX/ AGENTBOX/3 HELLO bad!nonce\n" +
		"AGENTBOX/x HELLO abc\nAAGENTBOX/3 HELLO\n" +
		strings.Repeat("z", maxLine+10) + "AGENTBOX/3 HELLO " + strings.Repeat("q", maxLine) + "\n" +
		"AGENTBOX/3 HELAGENTBOX/3 HELLO n-1_A\nAGENTBOX/3 HELLO later\n"
	r := bufio.NewReader(strings.NewReader(in))
	var out bytes.Buffer
	h, err := AcceptHello(r, &out, "dev")
	if err != nil {
		t.Fatal(err)
	}
	if h != (Hello{Version: 3, Nonce: "n-1_A"}) {
		t.Fatalf("got %+v", h)
	}
	if out.String() != "AGENTBOX/3 OK n-1_A dev\n" {
		t.Fatalf("reply %q", out.String())
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != "AGENTBOX/3 HELLO later\n" {
		t.Fatalf("consumed past the hello: rest %q", rest)
	}
}

func TestAcceptHelloVersionMismatch(t *testing.T) {
	var out bytes.Buffer
	_, err := AcceptHello(bufio.NewReader(strings.NewReader("AGENTBOX/4 HELLO abc\n")), &out, "dev")
	if !errors.Is(err, ErrVersionMismatch) {
		t.Fatalf("got %v", err)
	}
	want := "AGENTBOX/3 ERR abc guest agent speaks protocol 3, host 4: rebuild the image with a matching agentbox-guest\n"
	if out.String() != want {
		t.Fatalf("reply %q, want %q", out.String(), want)
	}
}

// fakeGuest answers the hello with a canned byte string.
func fakeGuest(t *testing.T, reply func(nonce string) string) (*bufio.Reader, io.Writer) {
	t.Helper()
	host, guest := net.Pipe()
	t.Cleanup(func() { host.Close(); guest.Close() })
	go func() {
		h, err := ReadHello(bufio.NewReader(guest))
		if err != nil {
			return
		}
		io.WriteString(guest, reply(h.Nonce))
	}()
	return bufio.NewReader(host), host
}

func TestClientHandshakeSkipsStaleReplies(t *testing.T) {
	r, w := fakeGuest(t, func(n string) string {
		return "\x00\x00\x00garbage AGENTBOX/3 OK other v0\nAGENTBOX/4 ERR other nope\nAGENTBOX/3 OK " + n + " v9\nAFTER"
	})
	ver, err := ClientHandshake(r, w, "mynonce")
	if err != nil || ver != "v9" {
		t.Fatalf("got %q, %v", ver, err)
	}
	rest := make([]byte, 5)
	if _, err := io.ReadFull(r, rest); err != nil || string(rest) != "AFTER" {
		t.Fatalf("bytes after reply: %q %v", rest, err)
	}
}

func TestClientHandshakeMismatch(t *testing.T) {
	r, w := fakeGuest(t, func(n string) string { return "AGENTBOX/4 OK " + n + " v3\n" })
	_, err := ClientHandshake(r, w, "abc")
	if !errors.Is(err, ErrVersionMismatch) {
		t.Fatalf("got %v", err)
	}
	want := "agentproto: protocol version mismatch: guest agent speaks protocol 4, host 3: rebuild the image with a matching agentbox-guest"
	if err.Error() != want {
		t.Fatalf("message %q", err.Error())
	}
}

func TestClientHandshakeRefused(t *testing.T) {
	r, w := fakeGuest(t, func(n string) string { return "AGENTBOX/3 ERR " + n + " busy\n" })
	_, err := ClientHandshake(r, w, "abc")
	if !errors.Is(err, ErrHandshakeRefused) || !strings.HasSuffix(err.Error(), ": busy") {
		t.Fatalf("got %v", err)
	}
}

func TestHandshakeScanIsBounded(t *testing.T) {
	junk := bytes.Repeat([]byte("AGENTBOX/3 HELLO no spaces allowed here\n"), 2*MaxHandshakeScan/40)
	r := bufio.NewReader(bytes.NewReader(junk))
	_, err := ReadHello(r)
	if !errors.Is(err, ErrNoHandshake) {
		t.Fatalf("got %v", err)
	}
	rest, _ := io.ReadAll(r)
	if consumed := len(junk) - len(rest); consumed != MaxHandshakeScan {
		t.Fatalf("consumed %d bytes, want %d", consumed, MaxHandshakeScan)
	}
	if _, err := ClientHandshake(bufio.NewReader(bytes.NewReader(junk)), io.Discard, "n"); !errors.Is(err, ErrNoHandshake) {
		t.Fatalf("client: got %v", err)
	}
}

func TestClientHandshakeRejectsBadNonce(t *testing.T) {
	if _, err := ClientHandshake(bufio.NewReader(strings.NewReader("")), io.Discard, "a b"); err == nil {
		t.Fatal("accepted nonce with a space")
	}
}

func FuzzReadHello(f *testing.F) {
	f.Add([]byte("AGENTBOX/3 HELLO abc\n"))
	f.Add([]byte("xxAGENTBOX/AGENTBOX/32 HELLO a-b_c\r\n"))
	f.Add([]byte("AGENTBOX/3 OK abc v\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ReadHello(bufio.NewReader(bytes.NewReader(data)))
		if err == nil {
			if h.Version <= 0 || !validToken(h.Nonce) {
				t.Fatalf("accepted %+v", h)
			}
			if !bytes.Contains(data, []byte(" HELLO "+h.Nonce)) {
				t.Fatalf("nonce %q not in input", h.Nonce)
			}
		}
		// The host side scanner must not panic on the same bytes.
		ClientHandshake(bufio.NewReader(bytes.NewReader(data)), io.Discard, "abc")
	})
}
