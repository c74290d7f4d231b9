package agentproto

import "testing"

func TestNetworkConfigRoundTrip(t *testing.T) {
	in := "10.213.0.2/30,gw=10.213.0.1,dns=10.213.0.1,mac=02:ab:01:23:45:67"
	r, err := ParseNetworkConfig(in)
	if err != nil {
		t.Fatal(err)
	}
	want := NetworkRequest{Address: "10.213.0.2/30", Gateway: "10.213.0.1", DNS: "10.213.0.1", MAC: "02:ab:01:23:45:67"}
	if r != want {
		t.Fatalf("parsed %+v, want %+v", r, want)
	}
	if r.String() != in {
		t.Fatalf("String() = %q, want %q", r.String(), in)
	}
	for _, bad := range []string{"", "10.213.0.2", "fd00::2/64", "10.213.0.2/30,gw=x", "10.213.0.2/30,dns=fd00::1", "10.213.0.2/30,mac=zz", "10.213.0.2/30,via=1.2.3.4"} {
		if _, err := ParseNetworkConfig(bad); err == nil {
			t.Errorf("ParseNetworkConfig(%q) accepted", bad)
		}
	}
}

// FuzzParseNetworkConfig: the guest parses agentbox.net= from its kernel
// command line; whatever it accepts is a valid request that prints back to
// the same value.
func FuzzParseNetworkConfig(f *testing.F) {
	for _, s := range []string{"10.213.0.2/30,gw=10.213.0.1,dns=10.213.0.1,mac=02:ab:01:23:45:67", "10.0.0.2/8", "", ",", "1.2.3.4/33,gw=", "10.213.0.2/30,mac=02:AB:01:23:45:67"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseNetworkConfig(s)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted %q but Validate: %v", s, err)
		}
		r2, err := ParseNetworkConfig(r.String())
		if err != nil || r2 != r {
			t.Fatalf("%q: String %q parses to %+v, %v", s, r.String(), r2, err)
		}
	})
}
