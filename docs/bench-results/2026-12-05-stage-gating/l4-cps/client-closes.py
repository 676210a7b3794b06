import socket, sys
port=int(sys.argv[1]); n=int(sys.argv[2])
req=b"GET /size/128 HTTP/1.1\r\nHost: bench\r\n\r\n"
ok=0
for i in range(n):
    s=socket.create_connection(("127.0.0.1",port))
    s.sendall(req)
    data=b""
    while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n")+4+128:
        d=s.recv(65536)
        if not d: break
        data+=d
    s.close()
    if data.startswith(b"HTTP/1.1 200"): ok+=1
print("ok",ok)
