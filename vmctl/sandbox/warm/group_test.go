package warm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// TestTemplateGroups: the admin's and sharing tenants' warm creates have
// the shared key (as before groups existed); a tenant that does not share
// has a key of its own, another per tenant.
func TestTemplateGroups(t *testing.T) {
	w := &Service{}
	key := func(tenant string) string {
		return templateKey("digest", "kvm", "q35", 1, 512, false, false, sandbox.ResourceRequest{}, w.groupOf(tenant))
	}
	// The key of the shared templates is the one of before groups: the
	// hash of the same parts, without a group.
	h := sha256.New()
	for _, s := range []string{"digest", "kvm", "q35", "1", "512", "false", "false", fmt.Sprintf("%+v", sandbox.ResourceRequest{})} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	shared := key("")
	if before := hex.EncodeToString(h.Sum(nil))[:24]; shared != before {
		t.Fatalf("the shared key %s changed from %s: existing templates would be orphaned", shared, before)
	}
	if shared != key("a") || shared != key("b") {
		t.Fatal("without a sharing predicate every tenant shares")
	}
	w.SetSharing(func(name string) bool { return name == "s" })
	if key("") != shared || key("s") != shared {
		t.Fatalf("the admin's %s and a sharing tenant's %s key differ from the shared %s", key(""), key("s"), shared)
	}
	if key("a") == shared || key("b") == shared || key("a") == key("b") {
		t.Fatalf("keys: a %s, b %s, shared %s: want three", key("a"), key("b"), shared)
	}
	if key("a") != key("a") {
		t.Fatal("a tenant's key is not stable")
	}
}
