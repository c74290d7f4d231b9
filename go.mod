module github.com/agentbox/agentbox

go 1.25.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/digitalocean/go-libvirt v0.0.0-20261013170128-efbbdf578ac8
	github.com/digitalocean/go-qemu v0.0.0-20250212194115-ee9b0668d242
	github.com/hashicorp/yamux v0.1.2
	github.com/urfave/cli/v2 v2.27.7
	golang.org/x/sys v0.41.0
	libvirt.org/go/libvirtxml v1.12008.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	golang.org/x/crypto v0.48.0 // indirect
)
