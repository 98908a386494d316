// Inside a Docker sandbox: relay 127.0.0.1:<port> to the auth proxy's unix socket, run the step.
//
// The Node.js twin of forwarder.py, for images with node and no python (the runner image):
// `node forwarder.js PORT SOCKET [PORT SOCKET] -- CMD...`. The container has its own network
// namespace with only lo; the proxy listens on a unix socket on the host, bind-mounted in. Every
// port is bound before the command starts, so the agent never races the relay; it exits with the
// command's exit code (128+signal if killed). It never reads or logs what it relays.
'use strict';

const net = require('net');
const os = require('os');
const { spawn } = require('child_process');

function usage() {
  process.stderr.write('usage: forwarder.js PORT SOCKET [PORT SOCKET] -- CMD [ARGS...]\n');
  process.exit(2);
}

function relay(port, socketPath) {
  return new Promise((resolve, reject) => {
    // Half-open both ways: a side that ends its writes still gets the answer (SSE keeps streaming).
    const server = net.createServer({ allowHalfOpen: true }, (client) => {
      const upstream = net.connect({ path: socketPath, allowHalfOpen: true });
      const drop = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on('error', drop);
      upstream.on('error', drop);
      client.pipe(upstream);
      upstream.pipe(client);
    });
    server.on('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
}

function run(command) {
  const child = spawn(command[0], command.slice(1), { stdio: 'inherit' });
  for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => child.kill(sig));
  child.on('error', (err) => {
    const missing = err.code === 'ENOENT';
    process.stderr.write(`forwarder.js: ${command[0]}: ${missing ? 'command not found' : err.message}\n`);
    process.exit(missing ? 127 : 126);
  });
  child.on('exit', (code, signal) => process.exit(code === null ? 128 + os.constants.signals[signal] : code));
}

const argv = process.argv.slice(2);
const split = argv.indexOf('--');
const pairs = split < 0 ? [] : argv.slice(0, split);
const command = split < 0 ? [] : argv.slice(split + 1);
if (pairs.length < 2 || pairs.length % 2 || pairs.length > 4 || command.length === 0) usage();
const relays = [];
for (let i = 0; i < pairs.length; i += 2) {
  if (!/^\d+$/.test(pairs[i])) usage();
  relays.push(relay(Number(pairs[i]), pairs[i + 1]));
}
Promise.all(relays).then(
  () => run(command),
  (err) => {
    process.stderr.write(`forwarder.js: cannot listen: ${err.message}\n`);
    process.exit(125);
  },
);
