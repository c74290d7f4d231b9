package e2b

// EnvdVersion is the envd version create and connect advertise. The SDK
// gates features on it (its src/envd/versions.ts), and it is chosen so
// that every gate the data plane (vmctl/envd) passes is implemented and
// none it fails is needed:
//
//	0.1.0  below it the SDK refuses the sandbox (TemplateError)
//	0.1.4  recursive watchDir
//	0.1.5  getMetrics at all; 0.2.4 disk metrics
//	0.3.0  commands.run with stdin (the stdin flag of Start)
//	0.4.0  default user: the SDK sends no user, the server picks one
//	0.5.2  closeStdin
//	0.5.7  files.write as application/octet-stream
//
// Not passed (the SDK refuses the option with a TemplateError before any
// request): 0.6.2 file metadata (X-Metadata-* headers on writes, kept as
// extended attributes, which the guest agent cannot set), hence also 0.6.3
// includeEntry in watch events (the data plane fills the entry, but the
// gate sits above 0.6.2) and 0.6.4 watching network mounts.
// tests/e2b/sdk.test.mjs checks both sides through the SDK.
const EnvdVersion = "0.5.7"
