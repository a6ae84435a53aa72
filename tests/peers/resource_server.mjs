// A resource server that checks the token it receives, as an upstream behind airlock would
// (DESIGN §25): every POST must carry `Authorization: Bearer <JWT>` signed by the provider at
// <issuer> (its JWKS fetched from <issuer>/jwks), issued by it, for this server's audience
// (`http://127.0.0.1:<port>`; `…/short` under the path `/short`, `…/mcp` under `/mcp`), with
// scope `tools:call`.
//
//   node resource_server.mjs <port> <issuer>
//
// Every request is logged (path, whether it was accepted, the token's `sub`, `aud`, `act` and
// `scope`, the raw `authorization` and `cookie` headers); `GET /log` returns the log.
// Prints `resource server listening on <url>` when ready.
import http from 'node:http';
import * as jose from 'jose';

const [port, issuer] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const jwks = jose.createRemoteJWKSet(new URL(`${issuer}/jwks`));
const log = [];

http
  .createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', async () => {
      if (req.method === 'GET' && req.url === '/log') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(log));
        return;
      }
      const entry = {
        path: req.url,
        authorization: req.headers.authorization ?? null,
        cookie: req.headers.cookie ?? null,
        body,
      };
      const audience = req.url.startsWith('/short') ? `${base}/short` : req.url.startsWith('/mcp') ? `${base}/mcp` : base;
      const bearer = (req.headers.authorization ?? '').match(/^Bearer (.+)$/);
      try {
        if (!bearer) throw new Error('no bearer token');
        const { payload } = await jose.jwtVerify(bearer[1], jwks, { issuer, audience });
        if (!String(payload.scope ?? '').split(' ').includes('tools:call')) throw new Error('scope tools:call missing');
        Object.assign(entry, { accepted: true, sub: payload.sub, aud: payload.aud, act: payload.act ?? null, scope: payload.scope, exp: payload.exp });
        log.push(entry);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ ok: true, sub: payload.sub, act: payload.act ?? null }));
      } catch (e) {
        Object.assign(entry, { accepted: false, error: String(e.message ?? e) });
        log.push(entry);
        res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer error="invalid_token"' });
        res.end(JSON.stringify({ error: 'invalid_token', reason: entry.error }));
      }
    });
  })
  .listen(Number(port), '127.0.0.1', () => console.log(`resource server listening on ${base}`));
