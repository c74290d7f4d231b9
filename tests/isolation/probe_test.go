package isolation

// probePy is what the guests run (python3 of the test image), with one
// JSON argument {"op": ...}:
//
//	scan   {"tcp":[T...],"udp":[T...],"timeout":S} with T = {"addr","scope"?,"ports":[[lo,hi]...]}:
//	       every port at once (nonblocking, in batches under the fd limit);
//	       prints {"tcp":{ADDR:R},"udp":{ADDR:R}} with R = {"connected"|"answered":[ports],
//	       "refused":[ports],"errors":{ERRNO:[ports]},"timeout":COUNT}
//	dns    {"queries":[{"server","name","type","class","tcp"}]}: raw DNS questions;
//	       prints a list of {"rcode","aa","answers":[A records]} or {"timeout":true}
//	ipv6   {"addr","gw","gwmac","neigh":[...]}: gives eth0 the address (/64, ioctl), a default
//	       route via gw and permanent neighbour entries neigh → gwmac (netlink; no neighbour
//	       discovery is needed, so TCP and UDP really reach the tap); prints "ok"
const probePy = `
import collections, errno, fcntl, json, os, resource, select, socket, struct, sys, time
arg = json.loads(sys.argv[1])
op = arg["op"]

def expand(ranges):
    out = []
    for lo, hi in ranges: out.extend(range(lo, hi + 1))
    return out

def sockaddr(t, port):
    if ":" in t["addr"]:
        return (t["addr"], port, 0, socket.if_nametoindex(t["scope"]) if t.get("scope") else 0)
    return (t["addr"], port)

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard)); soft = hard
except (ValueError, OSError):
    pass
BATCH = max(64, min(4096, soft - 64))

def key(t):
    return t["addr"] + ("%" + t["scope"] if t.get("scope") else "")

def scan(targets, udp, timeout):
    # One sliding window over every (target, port): at most BATCH sockets
    # in flight, each given timeout seconds from its connect.
    res, jobs = {}, []
    for t in targets:
        res[key(t)] = {"answered" if udp else "connected": [], "refused": [], "errors": {}, "timeout": 0}
        jobs.extend((t, p) for p in expand(t["ports"]))
    ep = select.epoll(); socks = {}; pending = collections.deque(); gen = 0
    def done(fd, e):
        s, t, p, _ = socks.pop(fd); ep.unregister(fd); s.close()
        r = res[key(t)]
        if e == 0: r["answered" if udp else "connected"].append(p)
        elif e == errno.ECONNREFUSED: r["refused"].append(p)
        else: r["errors"].setdefault(str(e), []).append(p)
    i = 0
    while i < len(jobs) or socks:
        for _ in range(512):
            if i >= len(jobs) or len(socks) >= BATCH: break
            t, p = jobs[i]; i += 1
            fam = socket.AF_INET6 if ":" in t["addr"] else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)
            s.setblocking(False)
            e = s.connect_ex(sockaddr(t, p))
            if udp and e == 0:
                try: s.send(dnsq("probe.invalid", 1, 1, p) if p == 53 else b"agentbox isolation probe")
                except OSError as x: e = x.errno
            elif e == errno.EINPROGRESS: e = 0
            elif e == 0: e = -1  # connected at once
            if e != 0:
                r = res[key(t)]
                if e == -1: r["connected"].append(p)
                elif e == errno.ECONNREFUSED: r["refused"].append(p)
                else: r["errors"].setdefault(str(e), []).append(p)
                s.close(); continue
            gen += 1
            socks[s.fileno()] = (s, t, p, gen)
            ep.register(s.fileno(), (select.EPOLLIN if udp else select.EPOLLOUT) | select.EPOLLERR)
            pending.append((time.monotonic() + timeout, s.fileno(), gen))
        room = i < len(jobs) and len(socks) < BATCH
        wait = 0 if room else (max(0, pending[0][0] - time.monotonic()) if pending else 0)
        for fd, _ in ep.poll(wait, BATCH):
            if fd not in socks: continue
            s = socks[fd][0]
            e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if e == 0 and udp:
                try: s.recv(4096)
                except OSError as x: e = x.errno
            done(fd, e)
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            _, fd, g = pending.popleft()
            if fd in socks and socks[fd][3] == g:
                res[key(socks[fd][1])]["timeout"] += 1
                s = socks.pop(fd)[0]; ep.unregister(fd); s.close()
        while pending and (pending[0][1] not in socks or socks[pending[0][1]][3] != pending[0][2]):
            pending.popleft()
    ep.close()
    return res

def dnsq(name, qtype, qclass, qid):
    q = b"".join(bytes([len(l)]) + l.encode() for l in name.rstrip(".").split(".") if l) + b"\0"
    return struct.pack(">HHHHHH", qid & 0xffff, 0x0100, 1, 0, 0, 0) + q + struct.pack(">HH", qtype, qclass)

def skipname(b, i):
    while True:
        n = b[i]
        if n == 0: return i + 1
        if n & 0xc0 == 0xc0: return i + 2
        i += n + 1

def dnsparse(b):
    qid, flags, qd, an, ns, ar = struct.unpack(">HHHHHH", b[:12])
    i = 12
    for _ in range(qd): i = skipname(b, i) + 4
    answers = []
    for _ in range(an):
        i = skipname(b, i)
        typ, cls, ttl, rdlen = struct.unpack(">HHIH", b[i:i + 10]); i += 10
        answers.append(socket.inet_ntoa(b[i:i + rdlen]) if typ == 1 and rdlen == 4 else "type%d" % typ)
        i += rdlen
    return {"rcode": flags & 0xf, "aa": bool(flags & 0x400), "answers": answers}

def dns(q, n):
    m = dnsq(q["name"], q["type"], q.get("class", 1), 0x4000 + n)
    try:
        if q.get("tcp"):
            s = socket.create_connection((q["server"], 53), timeout=5)
            s.sendall(struct.pack(">H", len(m)) + m)
            buf = b""
            while len(buf) < 2 or len(buf) < 2 + struct.unpack(">H", buf[:2])[0]:
                c = s.recv(4096)
                if not c: break
                buf += c
            return dnsparse(buf[2:])
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
        s.sendto(m, (q["server"], 53))
        return dnsparse(s.recvfrom(4096)[0])
    except socket.timeout:
        return {"timeout": True}

def ipv6(a):
    idx = socket.if_nametoindex("eth0")
    s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    pton = lambda x: socket.inet_pton(socket.AF_INET6, x)
    fcntl.ioctl(s6, 0x8916, struct.pack("16sIi", pton(a["addr"]), 64, idx))  # SIOCSIFADDR
    # RTM_NEWNEIGH gw lladdr gwmac nud permanent
    def rta(t, d): return struct.pack("=HH", 4 + len(d), t) + d + b"\0" * ((4 - len(d) % 4) % 4)
    mac = bytes(int(x, 16) for x in a["gwmac"].split(":"))
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    for seq, n in enumerate(a["neigh"]):
        body = struct.pack("=BBHiHBB", socket.AF_INET6, 0, 0, idx, 0x80, 0, 0) + rta(1, pton(n)) + rta(2, mac)
        nl.send(struct.pack("=IHHII", 16 + len(body), 28, 0x1 | 0x4 | 0x400 | 0x100, seq + 1, 0) + body)
        ack = nl.recv(4096)
        code = struct.unpack("=i", ack[16:20])[0]
        if code != 0: raise OSError(-code, "RTM_NEWNEIGH " + n)
    rt = struct.pack("@16s16s16sIHHIQIi", pton("::"), pton("::"), pton(a["gw"]), 0, 0, 0, 1, 0, 0x3, idx)
    fcntl.ioctl(s6, 0x890B, rt)  # SIOCADDRT: RTF_UP|RTF_GATEWAY
    # duplicate address detection of the new address
    for _ in range(100):
        with open("/proc/net/if_inet6") as f:
            line = [l for l in f if l.startswith(pton(a["addr"]).hex())]
        if line and int(line[0].split()[4], 16) & 0x40 == 0: break  # IFA_F_TENTATIVE
        time.sleep(0.1)
    print("ok")

if op == "scan":
    print(json.dumps({"tcp": scan(arg.get("tcp", []), False, arg["timeout"]), "udp": scan(arg.get("udp", []), True, arg["timeout"])}))
elif op == "dns":
    print(json.dumps([dns(q, n) for n, q in enumerate(arg["queries"])]))
elif op == "ipv6":
    ipv6(arg)
`
