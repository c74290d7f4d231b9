package audit

// Keys of Entry.Args the daemon writes and `agentbox audit --replay`
// knows how to show. Other
// keys are shown as key=value (nil and "" values not at all); a key ending in "_ms" is shown as a
// duration, "_mib" as MiB and "_bytes" as a byte size (the suffix
// dropped), so new arguments read well without changes here.
const (
	// ArgCmd is the argv of exec and process.start ([]string), shown
	// shell-quoted after "$".
	ArgCmd = "cmd"
	// ArgCwd is the guest working directory of exec and process.start
	// (string), shown as the prompt ("/work $ make").
	ArgCwd = "cwd"
	// ArgEnvKeys holds the keys (not values) of the environment an exec
	// added ([]string); the replay leaves them out.
	ArgEnvKeys = "env_keys"
	// ArgDetached marks the exec of a detached process (bool); the replay
	// leaves it out (the action says so).
	ArgDetached = "detached"
	// ArgTimeoutMs is an exec's timeout in milliseconds.
	ArgTimeoutMs = "timeout_ms"
	// ArgPath is the guest path of a file action (string).
	ArgPath = "path"
	// ArgMode is the octal permission string of an upload or mkdir.
	ArgMode = "mode"
	// ArgImage, ArgName, ArgVCPUs and ArgMemoryMiB describe a create.
	ArgImage     = "image"
	ArgName      = "name"
	ArgVCPUs     = "vcpus"
	ArgMemoryMiB = "memory_mib"
	// ArgReason says why the daemon acted (reap, reconcile, state), shown
	// as plain text: "ttl reached", "domain vanished".
	ArgReason = "reason"
	// ArgSignal is the signal of process.kill (name or number).
	ArgSignal = "signal"
	// ArgPid is the guest pid of a detached process.
	ArgPid = "pid"
	// ArgForce, ArgRecursive and ArgParents are the booleans of remove,
	// file.remove and file.mkdir.
	ArgForce     = "force"
	ArgRecursive = "recursive"
	ArgParents   = "parents"
	// ArgClose says process.stdin closed the stdin after writing (bool).
	ArgClose = "close"
	// ArgEvents is the number of events a file.watch sent.
	ArgEvents = "events"
)
