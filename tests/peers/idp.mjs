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
// - clients for airlock as an upstream's OAuth client (DESIGN §25): `tools-svc` (client
//   credentials, scope `tools:call`) and `exchange-svc` (RFC 8693 token exchange, registered
//   with `registerGrantType`: the subject token must be one this provider signed; the new
//   token is for its `sub`, with `act` naming the client); a resource whose URL ends in
//   `/short` gets tokens that live 3 s;
// - `GET /test/counts`: the token requests that succeeded and failed, by grant type;
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

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ttlFor = (resource) => (String(resource).endsWith('/short') ? 3 : 300);

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: 'tools-svc',
      client_secret: 'tools-svc-secret',
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      scope: 'tools:call',
      id_token_signed_response_alg: 'ES256',
    },
    {
      client_id: 'exchange-svc',
      client_secret: 'exchange-svc-secret',
      grant_types: [TOKEN_EXCHANGE],
      response_types: [],
      redirect_uris: [],
      scope: 'tools:call',
      id_token_signed_response_alg: 'ES256',
    },
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
  scopes: ['openid', 'profile', 'groups', 'airlock:call', 'tools:call'],
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
          scope: 'airlock:call tools:call',
          audience: resource,
          accessTokenFormat: 'jwt',
          accessTokenTTL: ttlFor(resource),
          jwt: { sign: { alg: 'ES256' } },
        };
      },
    },
  },
});
provider.proxy = false;

// RFC 8693 token exchange, through the provider's own token endpoint (client authentication,
// parameters, errors); the subject token is checked against this provider's keys.
const publicKeys = jose.createLocalJWKSet({ keys: keys.map(({ d, ...pub }) => pub) });
const signingKey = await jose.importJWK(keys[0], 'ES256');
provider.registerGrantType(
  TOKEN_EXCHANGE,
  async (ctx) => {
    const p = ctx.oidc.params;
    const types = ['urn:ietf:params:oauth:token-type:jwt', 'urn:ietf:params:oauth:token-type:access_token'];
    if (!types.includes(p.subject_token_type)) {
      throw new errors.InvalidRequest('unsupported subject_token_type');
    }
    let subject;
    try {
      ({ payload: subject } = await jose.jwtVerify(p.subject_token, publicKeys, { issuer }));
    } catch {
      throw new errors.InvalidGrant('the subject token is not one this provider issued, or it expired');
    }
    const audience = p.audience || p.resource;
    if (!audience) throw new errors.InvalidTarget('name the audience or the resource');
    const granted = (p.scope || '').split(' ').filter((s) => s === 'tools:call');
    const now = Math.floor(Date.now() / 1000);
    const ttl = ttlFor(audience);
    const clientId = ctx.oidc.client.clientId;
    const token = await new jose.SignJWT({ sub: subject.sub, scope: granted.join(' '), client_id: clientId, act: { sub: clientId } })
      .setProtectedHeader({ alg: 'ES256', kid: keys[0].kid, typ: 'at+jwt' })
      .setIssuer(issuer)
      .setAudience(audience)
      .setIssuedAt(now)
      .setExpirationTime(now + ttl)
      .setJti(`x-${now}-${Math.random().toString(36).slice(2)}`)
      .sign(signingKey);
    ctx.body = {
      access_token: token,
      issued_token_type: 'urn:ietf:params:oauth:token-type:access_token',
      token_type: 'Bearer',
      expires_in: ttl,
      scope: granted.join(' '),
    };
  },
  ['subject_token', 'subject_token_type', 'requested_token_type', 'audience', 'resource', 'scope', 'actor_token', 'actor_token_type'],
);

const counts = {};
const tally = (ctx, result) => {
  const grant = ctx.oidc?.params?.grant_type ?? 'unknown';
  counts[grant] = counts[grant] ?? { ok: 0, failed: 0 };
  counts[grant][result] += 1;
};
provider.on('grant.success', (ctx) => tally(ctx, 'ok'));
provider.on('grant.error', (ctx) => tally(ctx, 'failed'));

const callback = provider.callback();
const server = http.createServer((req, res) => {
  if (req.url === '/test/counts') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(counts));
    return;
  }
  callback(req, res);
});
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
