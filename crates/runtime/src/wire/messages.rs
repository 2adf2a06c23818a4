//! Messages on the wire: bincode (varint integers) inside our frames. Decoding is the one
//! place a peer's bytes become values, so it is hardened here: a message that cannot be decoded
//! — or whose decoding panics inside a dependency (tarpc turns a request's relative deadline
//! into an `Instant` with a plain `+`, which panics on overflow) — is an error that closes that
//! one connection, never a panic in the daemon.

use bincode::Options;
use bytes::{Bytes, BytesMut};
use serde::{Serialize, de::DeserializeOwned};
use std::io;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;

fn options() -> impl Options + Copy {
    bincode::DefaultOptions::new()
}

/// Decodes one message; any failure (including a panic while decoding) is `InvalidData`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> io::Result<T> {
    match catch_unwind(AssertUnwindSafe(|| options().deserialize::<T>(bytes))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a malformed message (decoding it failed inside the RPC layer)",
        )),
    }
}

/// Decodes a hello-layer frame, which keeps bincode's original layout (fixed-width integers,
/// trailing bytes allowed) so that every version can read a hello's version field and the
/// refusal sent back; failures are errors, never panics.
pub fn decode_legacy<T: DeserializeOwned>(bytes: &[u8]) -> io::Result<T> {
    match catch_unwind(AssertUnwindSafe(|| bincode::deserialize::<T>(bytes))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a malformed hello (decoding it panicked)",
        )),
    }
}

/// Encodes one message in the varint layout [`decode`] reads (not the hello's legacy layout).
pub fn encode<T: Serialize>(item: &T) -> io::Result<Vec<u8>> {
    options()
        .serialize(item)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Decodes `In`, encodes `Out`, holds neither (so it is `Send` and `Sync` whatever they are).
type Marker<In, Out> = PhantomData<(fn() -> In, fn(&Out))>;

/// The tokio-serde codec of every connection: [`decode`] and [`encode`].
pub struct Messages<In, Out>(Marker<In, Out>);

impl<In, Out> Default for Messages<In, Out> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<In: DeserializeOwned, Out> tokio_serde::Deserializer<In> for Messages<In, Out> {
    type Error = io::Error;

    fn deserialize(self: Pin<&mut Self>, src: &BytesMut) -> io::Result<In> {
        decode(src)
    }
}

impl<In, Out: Serialize> tokio_serde::Serializer<Out> for Messages<In, Out> {
    type Error = io::Error;

    fn serialize(self: Pin<&mut Self>, item: &Out) -> io::Result<Bytes> {
        encode(item).map(Bytes::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn messages_round_trip() {
        let v = (7u64, "x".to_string(), vec![1.5f64; 3]);
        let b = encode(&v).unwrap();
        assert_eq!(decode::<(u64, String, Vec<f64>)>(&b).unwrap(), v);
    }

    #[test]
    fn a_deadline_that_overflows_is_an_error_not_a_panic() {
        // A request whose context says "due in u64::MAX seconds".
        let ctx = encode(&(Duration::new(u64::MAX, 0), 0u128, 0u64, 0u8)).unwrap();
        let mut msg = vec![0u8]; // ClientMessage::Request
        msg.extend_from_slice(&ctx);
        let r = decode::<tarpc::ClientMessage<gridwise_proto::api::AgentApiRequest>>(&msg);
        assert!(r.is_err());
    }
}
