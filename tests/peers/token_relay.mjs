// A relay that adds a bearer token to every request, for test clients that send none (the
// MCP conformance suite). Usage: node token_relay.mjs LISTEN_PORT TARGET_URL TOKEN
import http from 'node:http';

const [port, target, token] = process.argv.slice(2);
const base = new URL(target);

http
  .createServer((req, res) => {
    const headers = { ...req.headers, host: base.host, authorization: `Bearer ${token}` };
    const up = http.request(
      { host: base.hostname, port: base.port, path: req.url, method: req.method, headers },
      (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      }
    );
    up.on('error', (e) => {
      res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(`relay: ${e.message}`);
    });
    req.pipe(up);
    res.on('close', () => up.destroy());
  })
  .listen(Number(port), '127.0.0.1', () => console.log(`relay listening ${port}`));
