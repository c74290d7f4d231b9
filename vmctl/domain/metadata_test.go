package domain

import "testing"

func TestMetadataRoundTrip(t *testing.T) {
	for _, m := range []Metadata{
		{SandboxID: "sb1", Image: "agentbox-test"},
		{SandboxID: "sb2", Image: "img", Owner: "0123456789abcdef"},
		{SandboxID: "sb2"},
		{SandboxID: `a<&>"'b`, Image: "x"},
	} {
		got, err := ParseMetadata(MarshalMetadata(m))
		if err != nil {
			t.Fatalf("ParseMetadata(%+v): %v", m, err)
		}
		if got != m {
			t.Errorf("round trip: got %+v, want %+v", got, m)
		}
	}
}

func TestParseMetadataOtherPrefix(t *testing.T) {
	// libvirt may hand the element back with any prefix; the namespace URI
	// is what identifies it.
	in := `<x:sandbox xmlns:x="https://agentbox.dev/xmlns/domain/1"><x:id>sb9</x:id></x:sandbox>`
	got, err := ParseMetadata(in)
	if err != nil {
		t.Fatal(err)
	}
	if got.SandboxID != "sb9" {
		t.Errorf("got %+v", got)
	}
}

func TestParseMetadataStrippedNamespace(t *testing.T) {
	// virDomainGetMetadata(VIR_DOMAIN_METADATA_ELEMENT, uri) returns the
	// element without its namespace.
	got, err := ParseMetadata("<sandbox>\n  <id>sb1</id>\n  <image>img</image>\n</sandbox>\n")
	if err != nil {
		t.Fatal(err)
	}
	if got != (Metadata{SandboxID: "sb1", Image: "img"}) {
		t.Errorf("got %+v", got)
	}
}

func TestParseMetadataRejectsForeign(t *testing.T) {
	for _, in := range []string{
		`<sandbox><image>x</image></sandbox>`,
		`<x:sandbox xmlns:x="https://example.com/other"><x:id>x</x:id></x:sandbox>`,
		`not xml`,
	} {
		if _, err := ParseMetadata(in); err == nil {
			t.Errorf("ParseMetadata(%q) succeeded", in)
		}
	}
}
