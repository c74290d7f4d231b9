package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// Domains returns the names of the agentbox domains libvirt knows at URI()
// (running or not: `virsh list --all --name`, names starting with
// "agentbox-"). A failing virsh fails the test.
func Domains(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command("virsh", "-c", URI(), "list", "--all", "--name").CombinedOutput()
	if err != nil {
		t.Fatalf("virsh list: %v: %s", err, out)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "agentbox-") {
			names = append(names, l)
		}
	}
	return names
}

// DomainsUsing returns the agentbox domains whose libvirt XML mentions one
// of dirs (their overlay, console log or agent socket live there): the
// domains of one test's sandboxes, whatever their IDs.
func DomainsUsing(t testing.TB, dirs ...string) []string {
	t.Helper()
	var found []string
	for _, name := range Domains(t) {
		xml, err := exec.Command("virsh", "-c", URI(), "dumpxml", name).Output()
		if err != nil {
			continue // gone since the listing
		}
		for _, d := range dirs {
			if d != "" && strings.Contains(string(xml), d) {
				found = append(found, name)
				break
			}
		}
	}
	return found
}

// DestroyDomain destroys a domain by name (virsh destroy), ignoring a
// domain that is already gone; it returns virsh's output on other errors.
func DestroyDomain(name string) (string, error) {
	out, err := exec.Command("virsh", "-c", URI(), "destroy", name).CombinedOutput()
	if err != nil && strings.Contains(string(out), "not found") {
		return "", nil
	}
	return string(out), err
}

// AssertNoDomains fails the test if libvirt still knows a domain named
// "agentbox-" + one of ids, or one whose XML mentions one of dirs; it
// destroys what it finds, so one test's leak does not leak into the next.
func AssertNoDomains(t testing.TB, ids []string, dirs ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want["agentbox-"+id] = true
	}
	leaked := map[string]bool{}
	for _, name := range Domains(t) {
		if want[name] {
			leaked[name] = true
		}
	}
	for _, name := range DomainsUsing(t, dirs...) {
		leaked[name] = true
	}
	for name := range leaked {
		t.Errorf("leaked libvirt domain %s", name)
		if out, err := DestroyDomain(name); err != nil {
			t.Errorf("virsh destroy %s: %v: %s", name, err, out)
		}
	}
}
