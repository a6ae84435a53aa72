// A real OpenID Connect provider for the identity tests (DESIGN §16): npm `oidc-provider`, a
// certified implementation, on loopback.
//
//   node idp.mjs <port> <keys.json> [--rotate] [--mint-port N]
//
// - issuer http://127.0.0.1:<port>; signing keys from <keys.json> (private JWKs, ES256), made
//   on first use; `--rotate` puts a new key first and keeps the old one, as a provider
//   rotating its keys does;
// - clients: `agent-svc`, `approver-svc`, `nobody-svc` (client credentials, JWT access tokens
//   for any http://127.0.0.1 resource, scope `airlock:call` when asked for), and
//   `airlock-inbox` (authorization code + PKCE, secret `inbox-secret`, redirect URI from
//   AIRLOCK_INBOX_REDIRECT);
// - users (any password): alice and bob (sec-approvers), carol (airlock-admins), robot
//   (agents), eve (no group);
// - with `--mint-port`, a second listener that signs the claims it is given with the
//   provider's own key (or a key it never published): the tokens a provider would never
//   issue (expired, another audience, `act` for a user), for the refusal tests.
//
// Prints `idp listening on <issuer>` when ready.
import fs from 'node:fs';
import http from 'node:http';
import Provider, { errors } from 'oidc-provider';
import * as jose from 'jose';

const [port, keysPath, ...rest] = process.argv.slice(2);
const rotate = rest.includes('--rotate');
const mintAt = rest.indexOf('--mint-port');
const mintPort = mintAt >= 0 ? Number(rest[mintAt + 1]) : 0;
const issuer = `http://127.0.0.1:${port}`;

async function newKey() {
  const { privateKey } = await jose.generateKeyPair('ES256', { extractable: true });
  const jwk = await jose.exportJWK(privateKey);
  return { ...jwk, kid: `k-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`, alg: 'ES256', use: 'sig' };
}

let keys = fs.existsSync(keysPath) ? JSON.parse(fs.readFileSync(keysPath, 'utf8')).keys : [];
if (keys.length === 0 || rotate) {
  keys = [await newKey(), ...keys];
  fs.writeFileSync(keysPath, JSON.stringify({ keys }));
}

const USERS = {
  alice: ['sec-approvers'],
  bob: ['sec-approvers'],
  carol: ['airlock-admins'],
  robot: ['agents'],
  eve: [],
};
const CLIENT_GROUPS = {
  'agent-svc': ['agents'],
  'approver-svc': ['sec-approvers'],
  'nobody-svc': [],
};
const service = (id) => ({
  client_id: id,
  client_secret: `${id}-secret`,
  grant_types: ['client_credentials'],
  response_types: [],
  redirect_uris: [],
  scope: 'airlock:call',
  id_token_signed_response_alg: 'ES256',
});

const provider = new Provider(issuer, {
  clients: [
    service('agent-svc'),
    service('approver-svc'),
    service('nobody-svc'),
    {
      client_id: 'airlock-inbox',
      client_secret: 'inbox-secret',
      grant_types: ['authorization_code'],
      response_types: ['code'],
      redirect_uris: [process.env.AIRLOCK_INBOX_REDIRECT ?? 'http://127.0.0.1:1/inbox/oidc/callback'],
      id_token_signed_response_alg: 'ES256',
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  jwks: { keys },
  cookies: { keys: ['airlock-test-idp'] },
  pkce: { required: () => true },
  scopes: ['openid', 'profile', 'groups', 'airlock:call'],
  claims: { openid: ['sub'], profile: ['name'], groups: ['groups'] },
  findAccount: async (ctx, id) => ({
    accountId: id,
    claims: async () => ({ sub: id, name: id, groups: USERS[id] ?? [] }),
  }),
  extraTokenClaims: async (ctx, token) =>
    token.kind === 'ClientCredentials' ? { groups: CLIENT_GROUPS[token.clientId] ?? [] } : undefined,
  features: {
    devInteractions: { enabled: true },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource) => {
        if (!resource.startsWith('http://127.0.0.1:')) throw new errors.InvalidTarget();
        return {
          scope: 'airlock:call',
          audience: resource,
          accessTokenFormat: 'jwt',
          accessTokenTTL: 300,
          jwt: { sign: { alg: 'ES256' } },
        };
      },
    },
  },
});
provider.proxy = false;

const server = http.createServer(provider.callback());
server.listen(Number(port), '127.0.0.1', async () => {
  if (mintPort) {
    const signing = await jose.importJWK(keys[0], 'ES256');
    const unpublished = await newKey();
    const stranger = await jose.importJWK(unpublished, 'ES256');
    http
      .createServer((req, res) => {
        let body = '';
        req.on('data', (c) => (body += c));
        req.on('end', async () => {
          try {
            // {"claims": {...}, "header": {...}?, "key": "published" | "unpublished"}
            const ask = JSON.parse(body);
            const now = Math.floor(Date.now() / 1000);
            const claims = { iss: issuer, iat: now, exp: now + 300, jti: `m-${now}-${Math.random()}`, ...ask.claims };
            for (const [k, v] of Object.entries(claims)) if (v === null) delete claims[k];
            const own = ask.key !== 'unpublished';
            const header = { alg: 'ES256', kid: own ? keys[0].kid : unpublished.kid, ...(ask.header ?? {}) };
            const token = await new jose.SignJWT(claims).setProtectedHeader(header).sign(own ? signing : stranger);
            res.writeHead(200, { 'content-type': 'application/json' });
            res.end(JSON.stringify({ token, kid: header.kid, public: keys.map(({ d, ...pub }) => pub) }));
          } catch (e) {
            res.writeHead(400);
            res.end(String(e));
          }
        });
      })
      .listen(mintPort, '127.0.0.1');
  }
  console.log(`idp listening on ${issuer}`);
});
