package domain

import (
	"encoding/xml"
	"fmt"
	"strings"
)

// MetadataNamespace is the XML namespace of agentbox's element in the
// domain <metadata>. libvirt keys custom metadata by namespace URI
// (virDomainGetMetadata with VIR_DOMAIN_METADATA_ELEMENT and this URI
// returns the element), so it must never change.
const MetadataNamespace = "https://agentbox.dev/xmlns/domain/1"

// MetadataPrefix is the namespace prefix used for [MetadataNamespace] in
// generated XML and when setting metadata through libvirt.
const MetadataPrefix = "agentbox"

// Metadata is what agentbox records about a domain in its <metadata>:
//
//	<agentbox:sandbox xmlns:agentbox="https://agentbox.dev/xmlns/domain/1">
//	  <agentbox:id>SANDBOX ID</agentbox:id>
//	  <agentbox:image>IMAGE NAME</agentbox:image>
//	  <agentbox:owner>DAEMON INSTANCE</agentbox:owner>
//	</agentbox:sandbox>
type Metadata struct {
	// SandboxID is the id of the sandbox owning the domain.
	SandboxID string
	// Image is the image name the sandbox was created from; may be empty.
	Image string
	// Owner is the instance id of the agentbox daemon that manages the
	// domain (its state store's id), or empty for in-process sandboxes
	// (`agentbox run`). A daemon reconciles only the domains it owns.
	Owner string
}

// metadataXML is the decoding shape of the metadata element. Tags carry
// no namespace so that they match both forms ParseMetadata accepts; the
// element's namespace is checked separately.
type metadataXML struct {
	XMLName xml.Name `xml:"sandbox"`
	ID      string   `xml:"id"`
	Image   string   `xml:"image"`
	Owner   string   `xml:"owner"`
}

// MarshalMetadata returns the <agentbox:sandbox> element for m, with its
// namespace declared on it, as libvirt stores it in <metadata>.
func MarshalMetadata(m Metadata) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<%s:sandbox xmlns:%s="%s">`, MetadataPrefix, MetadataPrefix, MetadataNamespace)
	writeElem(&b, "id", m.SandboxID)
	if m.Image != "" {
		writeElem(&b, "image", m.Image)
	}
	if m.Owner != "" {
		writeElem(&b, "owner", m.Owner)
	}
	fmt.Fprintf(&b, `</%s:sandbox>`, MetadataPrefix)
	return b.String()
}

func writeElem(b *strings.Builder, name, text string) {
	fmt.Fprintf(b, "<%s:%s>", MetadataPrefix, name)
	// EscapeText only fails on write errors; strings.Builder never fails.
	_ = xml.EscapeText(b, []byte(text))
	fmt.Fprintf(b, "</%s:%s>", MetadataPrefix, name)
}

// ParseMetadata decodes agentbox's metadata element. It accepts the
// element as written by [MarshalMetadata] (in [MetadataNamespace], any
// prefix) and as returned by virDomainGetMetadata, which selects the
// element by namespace URI and hands it back with the namespace stripped
// (<sandbox><id>...</id></sandbox>, observed with libvirt 9.0). It fails
// for a <sandbox> in another namespace or for a document without an id.
func ParseMetadata(s string) (Metadata, error) {
	var v metadataXML
	if err := xml.Unmarshal([]byte(s), &v); err != nil {
		return Metadata{}, fmt.Errorf("parse agentbox domain metadata: %w", err)
	}
	if v.XMLName.Space != "" && v.XMLName.Space != MetadataNamespace {
		return Metadata{}, fmt.Errorf("parse agentbox domain metadata: element in namespace %q, want %q", v.XMLName.Space, MetadataNamespace)
	}
	if v.ID == "" {
		return Metadata{}, fmt.Errorf("parse agentbox domain metadata: no sandbox id")
	}
	return Metadata{SandboxID: v.ID, Image: v.Image, Owner: v.Owner}, nil
}
