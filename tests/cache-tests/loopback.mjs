// Preloaded (node --import) into the cache-tests origin server so that it
// binds 127.0.0.1 only: the suite's server.mjs calls `server.listen(port)`,
// which would listen on every interface. A listen() given only a port (and
// perhaps a callback) gets the loopback host added; anything else is left as is.
import net from 'node:net'

const listen = net.Server.prototype.listen
net.Server.prototype.listen = function (...args) {
  const portOnly = typeof args[0] === 'number' ||
    (typeof args[0] === 'string' && /^\d+$/.test(args[0]))
  if (portOnly && (args.length === 1 || typeof args[1] === 'function')) {
    args.splice(1, 0, '127.0.0.1')
  }
  return listen.apply(this, args)
}
