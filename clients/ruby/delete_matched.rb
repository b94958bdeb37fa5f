# Runs Rails' ActiveSupport::Cache::RedisCacheStore#delete_matched once (SCAN c
# MATCH <namespace>:<pattern> COUNT 1000 to the end, DEL of each batch found) and
# prints "done". Used by tests/native_clients.rs; Debian ruby-activesupport and
# ruby-redis (scripts/install-deps.sh).
#
#   ruby delete_matched.rb PORT NAMESPACE PATTERN
require "active_support"
require "active_support/cache"
require "active_support/cache/redis_cache_store"
require "timeout"

port, namespace, pattern = ARGV
abort("usage: ruby delete_matched.rb PORT NAMESPACE PATTERN") unless pattern
store = ActiveSupport::Cache::RedisCacheStore.new(
  url: "redis://127.0.0.1:#{Integer(port)}/0", namespace: namespace,
  connect_timeout: 10, read_timeout: 10, write_timeout: 10, reconnect_attempts: 0,
  # Errors raise instead of being logged and swallowed.
  error_handler: ->(method:, returning:, exception:) { raise exception }
)
Timeout.timeout(60) { store.delete_matched(pattern) }
puts "done"
