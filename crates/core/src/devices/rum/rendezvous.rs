//! What a connect request says about the server it wants, shared by the
//! network devices' agents: the mode (client-server or peer), the tag the
//! server listens on (a hash of its discriminator, and in peer mode of
//! both), the client's wall-clock time (replay window) and the client's
//! discriminator. It travels as the RUM CONNECT_REQUEST's user data (64
//! bytes at most): mode (1), tag (16), time in ms (8), then the client's
//! discriminator (up to 39 bytes; longer ones are cut).

use super::mac::sha256;

/// Client-server request.
pub const MODE_CLIENT_SERVER: u8 = 1;
/// Peer-to-peer request.
pub const MODE_PEER: u8 = 2;
pub const TAG_LEN: usize = 16;
const USER_FIXED: usize = 1 + TAG_LEN + 8;
/// Longest client discriminator carried in a request.
pub const MAX_CARRIED_DISCRIMINATOR: usize = openvia_wire::rum::MAX_USER_DATA - USER_FIXED;
/// Requests older (or newer) than this are replays (or clocks too far apart).
pub const REPLAY_WINDOW_MS: u64 = 60_000;

/// The tag a server listens on: clients compute the same from the address.
pub fn tag(mode: u8, listener: &[u8], other: &[u8]) -> [u8; TAG_LEN] {
    let mut v = vec![mode, listener.len() as u8];
    v.extend_from_slice(listener);
    v.extend_from_slice(other);
    let h = sha256(&v);
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&h[..TAG_LEN]);
    t
}

pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What a connect request's user data says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestData {
    pub mode: u8,
    pub tag: [u8; TAG_LEN],
    pub time_ms: u64,
    pub client_disc: Vec<u8>,
}

impl RequestData {
    pub fn emit(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(USER_FIXED + self.client_disc.len());
        v.push(self.mode);
        v.extend_from_slice(&self.tag);
        v.extend_from_slice(&self.time_ms.to_be_bytes());
        let n = self.client_disc.len().min(MAX_CARRIED_DISCRIMINATOR);
        v.extend_from_slice(&self.client_disc[..n]);
        v
    }

    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() < USER_FIXED || !matches!(b[0], MODE_CLIENT_SERVER | MODE_PEER) {
            return None;
        }
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&b[1..1 + TAG_LEN]);
        Some(Self {
            mode: b[0],
            tag,
            time_ms: u64::from_be_bytes(b[1 + TAG_LEN..USER_FIXED].try_into().ok()?),
            client_disc: b[USER_FIXED..].to_vec(),
        })
    }
}

/// The user data of a client's request in `mode` from discriminator
/// `local` to `remote`: the tag the server listens on, the time now, and
/// `prefix` (what a device adds about the client: the Ethernet device's
/// host address) in front of the client's discriminator.
pub fn client_request(mode: u8, local: &[u8], remote: &[u8], prefix: &[u8]) -> Vec<u8> {
    let target = match mode {
        MODE_PEER => tag(MODE_PEER, remote, local),
        _ => tag(MODE_CLIENT_SERVER, remote, &[]),
    };
    let mut client_disc = prefix.to_vec();
    client_disc.extend_from_slice(local);
    RequestData {
        mode,
        tag: target,
        time_ms: wall_ms(),
        client_disc,
    }
    .emit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_data_round_trip() {
        let d = RequestData {
            mode: MODE_PEER,
            tag: tag(MODE_PEER, b"a", b"b"),
            time_ms: 12345,
            client_disc: b"client".to_vec(),
        };
        assert_eq!(RequestData::parse(&d.emit()), Some(d));
        assert_eq!(RequestData::parse(&[9; 30]), None);
        assert_eq!(RequestData::parse(&[1; 5]), None);
    }

    #[test]
    fn tags_separate_modes_and_orders() {
        assert_ne!(tag(MODE_PEER, b"a", b"b"), tag(MODE_PEER, b"b", b"a"));
        assert_ne!(
            tag(MODE_PEER, b"a", b""),
            tag(MODE_CLIENT_SERVER, b"a", b"")
        );
        assert_ne!(tag(MODE_PEER, b"ab", b""), tag(MODE_PEER, b"a", b"b"));
    }
}
