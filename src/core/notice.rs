//! Decoding what a subscription connection pushes: release notifications,
//! (un)subscribe confirmations. One pure function serves every subscriber,
//! standalone (`message` on the locker's channel) and Redis Cluster
//! (`smessage` on a key's sharded channel).

use redis::{PushKind, Value};

use super::names::KeyId;

/// What a push means to the locker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Notice {
    /// A release notification; the payload is the key's sha.
    Released(Vec<u8>),
    /// The locker-wide channel (`None`) or a key's channel is subscribed.
    Subscribed(Option<KeyId>),
    /// A key's channel was unsubscribed (by us, or by the node after its
    /// slot moved).
    Unsubscribed(KeyId),
}

/// Decodes one push for a locker whose standalone channel is `channel` and
/// whose sharded channels start with `<namespace>:lock-released:{`.
/// Anything else (other channels, other kinds, malformed data) is `None`.
pub(crate) fn decode(
    channel: &str,
    namespace: &str,
    kind: &PushKind,
    data: &[Value],
) -> Option<Notice> {
    let Some(Value::BulkString(name)) = data.first() else {
        return None;
    };
    let sharded_key = || {
        let prefix = format!("{namespace}:lock-released:{{");
        name.strip_prefix(prefix.as_bytes())
            .and_then(|rest| rest.strip_suffix(b"}"))
            .and_then(KeyId::from_hex)
    };
    let released = || match data.get(1) {
        Some(Value::BulkString(payload)) => Some(Notice::Released(payload.clone())),
        _ => None,
    };
    match kind {
        PushKind::Message if name == channel.as_bytes() => released(),
        PushKind::Subscribe if name == channel.as_bytes() => Some(Notice::Subscribed(None)),
        PushKind::SMessage => sharded_key().and_then(|_| released()),
        PushKind::SSubscribe => sharded_key().map(|key| Notice::Subscribed(Some(key))),
        PushKind::SUnsubscribe => sharded_key().map(Notice::Unsubscribed),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::names::Channel;

    fn bulk(s: &[u8]) -> Value {
        Value::BulkString(s.to_vec())
    }

    #[test]
    fn standalone_messages_on_our_channel_are_release_notifications() {
        let sha = KeyId::of("k").to_hex();
        let data = [bulk(b"ns:lock-released"), bulk(sha.as_bytes())];
        assert_eq!(
            decode("ns:lock-released", "ns", &PushKind::Message, &data),
            Some(Notice::Released(sha.into_bytes()))
        );
        let other = [bulk(b"other"), bulk(b"x")];
        assert_eq!(
            decode("ns:lock-released", "ns", &PushKind::Message, &other),
            None
        );
        let confirm = [bulk(b"ns:lock-released"), Value::Int(1)];
        assert_eq!(
            decode("ns:lock-released", "ns", &PushKind::Subscribe, &confirm),
            Some(Notice::Subscribed(None))
        );
    }

    #[test]
    fn sharded_pushes_name_their_key() {
        let key = KeyId::of("job");
        let channel = Channel::Sharded.name("ns", key);
        let sha = key.to_hex();
        let msg = [bulk(channel.as_bytes()), bulk(sha.as_bytes())];
        assert_eq!(
            decode("ns:lock-released", "ns", &PushKind::SMessage, &msg),
            Some(Notice::Released(sha.into_bytes()))
        );
        let sub = [bulk(channel.as_bytes()), Value::Int(1)];
        assert_eq!(
            decode("ns:lock-released", "ns", &PushKind::SSubscribe, &sub),
            Some(Notice::Subscribed(Some(key)))
        );
        assert_eq!(
            decode("ns:lock-released", "ns", &PushKind::SUnsubscribe, &sub),
            Some(Notice::Unsubscribed(key))
        );
        let foreign = [bulk(b"other:lock-released:{ab}"), Value::Int(1)];
        assert_eq!(
            decode("ns:lock-released", "ns", &PushKind::SSubscribe, &foreign),
            None
        );
    }

    #[test]
    fn malformed_pushes_are_ignored() {
        for data in [vec![], vec![Value::Nil], vec![Value::Int(3), bulk(b"x")]] {
            for kind in [PushKind::Message, PushKind::SMessage, PushKind::SSubscribe] {
                assert_eq!(decode("c", "ns", &kind, &data), None);
            }
        }
    }
}
