//! Fencing Redis keys: a Lua script that compares the writer's token with
//! the highest one a fence key has admitted and makes the write only if it
//! is not lower, in one atomic step.
//!
//! ```no_run
//! use tenure_redis::fence;
//!
//! # async fn demo(token: u64) -> Result<(), Box<dyn std::error::Error>> {
//! let client = redis::Client::open("redis://127.0.0.1:6379")?;
//! let mut conn = client.get_multiplexed_async_connection().await?;
//! // The hash tag {billing} keeps both keys in one slot on a Redis Cluster.
//! match fence::fenced_set(&mut conn, "{billing}:fence", token, &[("{billing}:report", b"the report")]).await? {
//!     Ok(()) => println!("written"),
//!     Err(stale) => println!("refused: {stale}"), // a later term has written
//! }
//! # Ok(()) }
//! ```
//!
//! Writes other than `SET` (a hash field, a stream entry) need a script of
//! their own: copy [`FENCED_SET_LUA`] and change its last loop. The fence
//! is only as durable as Redis: a restart that loses or rolls back the fence
//! key lets an older token in again (see the crate docs on data loss).
//! `examples/fencing_redis.rs` runs a stale leader against it; `docs/fencing.md`
//! in the repository has the other recipes.

use std::sync::LazyLock;

use tenure::fence::StaleToken;

/// The script behind [`fenced_set`], for other clients and languages.
///
/// `KEYS[1]`: the fence key, holding the highest token admitted (decimal);
/// `KEYS[2..]`: the keys to set. `ARGV[1]`: the writer's token (decimal, no
/// leading zeros); `ARGV[2..]`: one value per key to set. Replies
/// `{1, token}` when it wrote (the fence key now holds the token) or
/// `{0, highest}` when it refused because the fence key holds a higher
/// token; a malformed token or fence value is an error reply.
///
/// Tokens are compared as decimal strings (length first, then digit by
/// digit), not as Lua numbers: those are doubles and would take 2^53 + 1
/// for 2^53, while tenure's tokens are `u64`.
pub const FENCED_SET_LUA: &str = r"
local token = ARGV[1]
local function is_token(s)
  return string.len(s) <= 20 and string.match(s, '^[1-9][0-9]*$') ~= nil
end
if not is_token(token) then
  return redis.error_reply('ERR tenure fence: the token must be a decimal integer above 0 without leading zeros')
end
if #KEYS ~= #ARGV then
  return redis.error_reply('ERR tenure fence: give one value per key to set')
end
local highest = redis.call('GET', KEYS[1])
if highest then
  if not is_token(highest) then
    return redis.error_reply('ERR tenure fence: the fence key holds something other than a token')
  end
  if string.len(highest) > string.len(token)
      or (string.len(highest) == string.len(token) and highest > token) then
    return {0, highest}
  end
end
redis.call('SET', KEYS[1], token)
for i = 2, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i])
end
return {1, token}
";

static FENCED_SET: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(FENCED_SET_LUA));

/// Sets `writes` (key, value) if `fence_key` has not admitted a token above
/// `token`, and raises the fence to `token`, atomically ([`FENCED_SET_LUA`]).
/// The outer error is Redis's (connection, wrong key type, a fence key
/// holding something else); the inner one is the refusal.
///
/// On a Redis Cluster every key must hash to one slot: give them a common
/// hash tag (`{billing}:fence`, `{billing}:report`).
pub async fn fenced_set<C>(
    conn: &mut C,
    fence_key: &str,
    token: u64,
    writes: &[(&str, &[u8])],
) -> redis::RedisResult<Result<(), StaleToken>>
where
    C: redis::aio::ConnectionLike + Send,
{
    let mut invocation = FENCED_SET.key(fence_key);
    invocation.arg(token.to_string());
    for (key, value) in writes {
        invocation.key(*key).arg(*value);
    }
    let (written, value): (i64, String) = invocation.invoke_async(conn).await?;
    if written == 1 {
        return Ok(Ok(()));
    }
    match value.parse() {
        Ok(highest) => Ok(Err(StaleToken { token, highest })),
        Err(_) => Err(redis::RedisError::from((
            redis::ErrorKind::TypeError,
            "the fence script replied with a token that is not a u64",
        ))),
    }
}
