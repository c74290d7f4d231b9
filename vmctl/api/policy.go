package api

// Error codes of policy plugins (serve --policy, vmctl/policy; see
// docs/policy.md).
const (
	// CodePolicyDenied is answered 403 to a call the policy plugin
	// denied; the message carries the plugin's reason.
	CodePolicyDenied = "policy_denied"
	// CodePolicyUnavailable is answered 503 to a call the policy plugin
	// could not decide (it crashed, timed out, failed its handshake or is
	// being restarted): the daemon fails closed.
	CodePolicyUnavailable = "policy_unavailable"
)
