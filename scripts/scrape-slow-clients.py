#!/usr/bin/env python3
# Scrape time of `ringcast stats --serve` with 10 slow clients connected (each sends one byte
# per 0.9 s and reconnects when cut off): 10 scrapes 1 s apart, each one's seconds and whether it
# was answered 200. Usage: scripts/scrape-slow-clients.py target/debug/ringcast LABEL
# (starts an engine daemon without a fabric and the server; kills both at the end).
import socket, subprocess, sys, threading, time, os
exe, label = sys.argv[1], sys.argv[2]
name = f"scrape-bench-{os.getpid()}"
eng = subprocess.Popen([exe, "engine", "--name", name], env={**os.environ, "RINGCAST_LOG_LEVEL": "0", "RINGCAST_FABRIC": "none"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1.0)
srv = subprocess.Popen([exe, "stats", "--engine", name, "--serve", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
addr = srv.stdout.readline().strip().removeprefix("serving http://").removesuffix("/metrics")
host, port = addr.rsplit(":", 1); port = int(port)
stop = time.time() + 400
def slow():
    while time.time() < stop:
        try:
            s = socket.create_connection((host, port))
            for b in b"GET /metrics HTTP/1.1\r\n\r\n":
                if time.time() > stop: break
                s.send(bytes([b])); time.sleep(0.9)
            s.close()
        except OSError:
            time.sleep(0.1)
ts = [threading.Thread(target=slow, daemon=True) for _ in range(10)]
for t in ts: t.start()
time.sleep(2)
times = []
for i in range(10):
    time.sleep(1)
    t0 = time.time()
    try:
        s = socket.create_connection((host, port)); s.settimeout(120)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            d = s.recv(65536)
            if not d: break
            data += d
        ok = data.startswith(b"HTTP/1.1 200")
    except OSError as e:
        ok = False
    times.append((round(time.time() - t0, 3), ok))
print(label, "scrape seconds (ok) with 10 slow clients:", times, flush=True)
stop = 0
srv.kill(); eng.kill(); srv.wait(); eng.wait()
