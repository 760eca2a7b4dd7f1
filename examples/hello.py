# A small program to show what a cellblock jail looks like from inside.
import os
import platform
import socket

print(f"Hello from Python {platform.python_version()} in a cellblock jail")
print(f"uid={os.getuid()} pid={os.getpid()} cwd={os.getcwd()} hostname={socket.gethostname()}")
print("processes visible:", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
print("network interfaces:", [name for _, name in socket.if_nameindex()])
try:
    open("/usr/evil", "w")
except OSError as e:
    print("writing to the rootfs:", e.strerror)
try:
    socket.create_connection(("1.1.1.1", 53), timeout=1)
except OSError as e:
    print("reaching the internet:", e.strerror or e)
