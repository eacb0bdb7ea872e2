//! Message encodings. PvmDataDefault is XDR: every item big-endian, shorts
//! widened to 4 bytes, byte runs padded to 4, so any host can read it.
//! PvmDataRaw and PvmDataInPlace carry native bytes. Data arrive as byte
//! spans of the caller's array, element `i` at `i * stride * size`.

use crate::error::{PvmError, PvmResult};
use crate::pool::PackOut;

pub const ENC_DEFAULT: i32 = 0;
pub const ENC_RAW: i32 = 1;
pub const ENC_INPLACE: i32 = 2;

/// An element type of the pk/upk family (unsigned kinds share a layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    Byte,
    Short,
    Int,
    Long,
    Float,
    Double,
    Cplx,
    Dcplx,
}

impl Elem {
    /// Native size of one element.
    pub fn size(self) -> usize {
        match self {
            Elem::Byte => 1,
            Elem::Short => 2,
            Elem::Int | Elem::Float => 4,
            Elem::Long | Elem::Double | Elem::Cplx => 8,
            Elem::Dcplx => 16,
        }
    }

    /// Size of one XDR word group for this element (components reversed
    /// separately: a complex is two floats).
    fn xdr_part(self) -> usize {
        match self {
            Elem::Cplx => 4,
            Elem::Dcplx => 8,
            e => e.size(),
        }
    }

    /// Element type of a PVM_* data type code (pvm_psend, pvm_reduce).
    pub fn from_pvm_type(t: i32) -> Option<Elem> {
        Some(match t {
            1 => Elem::Byte,
            2 | 9 => Elem::Short,
            3 | 10 => Elem::Int,
            4 => Elem::Float,
            5 => Elem::Cplx,
            6 => Elem::Double,
            7 => Elem::Dcplx,
            8 | 11 => Elem::Long,
            _ => return None,
        })
    }
}

/// Number of bytes of the caller's array that `n` elements at `stride` span.
pub fn span(elem: Elem, n: usize, stride: usize) -> usize {
    if n == 0 {
        0
    } else {
        ((n - 1) * stride + 1) * elem.size()
    }
}

fn is_native(enc: i32) -> bool {
    enc == ENC_RAW || enc == ENC_INPLACE
}

fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// Appends `n` elements taken from `src` every `stride` elements.
pub fn pack(enc: i32, elem: Elem, src: &[u8], n: usize, stride: usize, out: &mut impl PackOut) {
    let size = elem.size();
    debug_assert!(src.len() >= span(elem, n, stride));
    out.reserve_out(packed_len(enc, elem, n));
    if is_native(enc) {
        if stride == 1 {
            out.put(&src[..n * size]);
        } else {
            for i in 0..n {
                out.put(&src[i * stride * size..][..size]);
            }
        }
        return;
    }
    // XDR goes through a small staging block so the sink sees few calls.
    let mut st = Stage {
        buf: [0; 512],
        at: 0,
        out,
    };
    match elem {
        Elem::Byte => {
            for i in 0..n {
                st.emit(&[src[i * stride]]);
            }
            st.emit(&[0u8; 3][..pad4(n) - n]);
        }
        Elem::Short => {
            for i in 0..n {
                let b = &src[i * stride * 2..][..2];
                let v = i16::from_ne_bytes([b[0], b[1]]) as i32;
                st.emit(&v.to_be_bytes());
            }
        }
        _ => {
            let part = elem.xdr_part();
            let mut w = [0u8; 16];
            for i in 0..n {
                w[..size].copy_from_slice(&src[i * stride * size..][..size]);
                if cfg!(target_endian = "little") {
                    w[..size].chunks_exact_mut(part).for_each(|p| p.reverse());
                }
                st.emit(&w[..size]);
            }
        }
    }
    st.flush();
}

struct Stage<'o, O: PackOut> {
    buf: [u8; 512],
    at: usize,
    out: &'o mut O,
}

impl<O: PackOut> Stage<'_, O> {
    fn emit(&mut self, b: &[u8]) {
        if self.at + b.len() > self.buf.len() {
            self.flush();
        }
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    fn flush(&mut self) {
        self.out.put(&self.buf[..self.at]);
        self.at = 0;
    }
}

/// Bytes `n` packed elements occupy in the message.
fn packed_len(enc: i32, elem: Elem, n: usize) -> usize {
    if is_native(enc) {
        return n * elem.size();
    }
    match elem {
        Elem::Byte => pad4(n),
        Elem::Short => n * 4,
        e => n * e.size(),
    }
}

/// Reads `n` elements at `*pos` into `dst` every `stride` elements.
pub fn unpack(
    enc: i32,
    elem: Elem,
    msg: &[u8],
    pos: &mut usize,
    n: usize,
    stride: usize,
    dst: &mut [u8],
) -> PvmResult<()> {
    let need = packed_len(enc, elem, n);
    if msg.len() - *pos < need {
        return Err(PvmError::NoData);
    }
    let data = &msg[*pos..*pos + need];
    let size = elem.size();
    if is_native(enc) {
        if stride == 1 {
            dst[..need].copy_from_slice(data);
        } else {
            for i in 0..n {
                dst[i * stride * size..][..size].copy_from_slice(&data[i * size..][..size]);
            }
        }
    } else {
        match elem {
            Elem::Byte => {
                for i in 0..n {
                    dst[i * stride] = data[i];
                }
            }
            Elem::Short => {
                for i in 0..n {
                    let w = &data[i * 4..][..4];
                    let v = i32::from_be_bytes([w[0], w[1], w[2], w[3]]) as i16;
                    dst[i * stride * 2..][..2].copy_from_slice(&v.to_ne_bytes());
                }
            }
            _ => {
                let part = elem.xdr_part();
                for i in 0..n {
                    let out = &mut dst[i * stride * size..][..size];
                    let inp = &data[i * size..][..size];
                    for (o, p) in out.chunks_exact_mut(part).zip(inp.chunks_exact(part)) {
                        o.copy_from_slice(p);
                        if cfg!(target_endian = "little") {
                            o.reverse();
                        }
                    }
                }
            }
        }
    }
    *pos += need;
    Ok(())
}

/// Appends a string: its length with the NUL, then its bytes and a NUL.
pub fn pack_str(enc: i32, s: &[u8], out: &mut impl PackOut) {
    let len = (s.len() + 1) as i32;
    if is_native(enc) {
        out.reserve_out(4 + s.len() + 1);
        out.put(&len.to_ne_bytes());
        out.put(s);
        out.put(&[0]);
    } else {
        out.reserve_out(4 + pad4(s.len() + 1));
        out.put(&len.to_be_bytes());
        let start = out.out_len();
        out.put(s);
        out.put(&[0]);
        out.zero_to(start + pad4(s.len() + 1));
    }
}

/// Reads a string packed by [`pack_str`]; the result includes its NUL.
pub fn unpack_str<'m>(enc: i32, msg: &'m [u8], pos: &mut usize) -> PvmResult<&'m [u8]> {
    if msg.len() - *pos < 4 {
        return Err(PvmError::NoData);
    }
    let w = [msg[*pos], msg[*pos + 1], msg[*pos + 2], msg[*pos + 3]];
    let len = if is_native(enc) {
        i32::from_ne_bytes(w)
    } else {
        i32::from_be_bytes(w)
    };
    if len < 1 {
        return Err(PvmError::BadMsg);
    }
    let len = len as usize;
    let stored = if is_native(enc) { len } else { pad4(len) };
    if msg.len() - *pos - 4 < stored {
        return Err(PvmError::BadMsg);
    }
    let s = &msg[*pos + 4..*pos + 4 + len];
    if s[len - 1] != 0 {
        return Err(PvmError::BadMsg);
    }
    *pos += 4 + stored;
    Ok(s)
}

/// Packs one int the way pvm_pkint(&v, 1, 1) would.
pub fn pack_i32(enc: i32, v: i32, out: &mut impl PackOut) {
    pack(enc, Elem::Int, &v.to_ne_bytes(), 1, 1, out);
}

/// Unpacks one int.
pub fn unpack_i32(enc: i32, msg: &[u8], pos: &mut usize) -> PvmResult<i32> {
    let mut b = [0u8; 4];
    unpack(enc, Elem::Int, msg, pos, 1, 1, &mut b)?;
    Ok(i32::from_ne_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T: Copy>(v: &[T]) -> Vec<u8> {
        let n = std::mem::size_of_val(v);
        // SAFETY: any initialised Copy value can be viewed as bytes.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, n) }.to_vec()
    }

    #[test]
    fn xdr_ints_are_big_endian() {
        let mut out = Vec::new();
        pack(
            ENC_DEFAULT,
            Elem::Int,
            &bytes_of(&[1i32, -2]),
            2,
            1,
            &mut out,
        );
        assert_eq!(out, [0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe]);
    }

    #[test]
    fn every_type_round_trips_in_every_encoding_with_stride() {
        let cases: Vec<(Elem, Vec<u8>)> = vec![
            (Elem::Byte, bytes_of(&[1u8, 2, 3, 4, 5, 6, 7])),
            (Elem::Short, bytes_of(&[-1i16, 2, -3, 4, 5, 6, 7])),
            (Elem::Int, bytes_of(&[-1i32, 2, 3, 4, 5, 6, 7])),
            (Elem::Long, bytes_of(&[-1i64, 2, 3, 4, 5, 6, 7])),
            (
                Elem::Float,
                bytes_of(&[1.5f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]),
            ),
            (
                Elem::Double,
                bytes_of(&[1.5f64, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]),
            ),
            (
                Elem::Cplx,
                bytes_of(&[1.5f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
            ),
            (
                Elem::Dcplx,
                bytes_of(&[1.5f64, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
            ),
        ];
        for enc in [ENC_DEFAULT, ENC_RAW] {
            for (elem, src) in &cases {
                let (n, stride) = (src.len() / elem.size() / 2, 2);
                let mut msg = Vec::new();
                pack(enc, *elem, src, n, stride, &mut msg);
                pack_str(enc, b"tail", &mut msg);
                let mut dst = vec![0u8; src.len()];
                let mut pos = 0;
                unpack(enc, *elem, &msg, &mut pos, n, stride, &mut dst).unwrap();
                for i in 0..n {
                    let s = elem.size();
                    assert_eq!(
                        dst[i * 2 * s..][..s],
                        src[i * 2 * s..][..s],
                        "{elem:?} enc {enc}"
                    );
                }
                assert_eq!(unpack_str(enc, &msg, &mut pos).unwrap(), b"tail\0");
                assert_eq!(
                    unpack(enc, *elem, &msg, &mut pos, 1, 1, &mut dst),
                    Err(PvmError::NoData)
                );
            }
        }
    }

    #[test]
    fn corrupt_string_is_bad_msg() {
        let mut msg = Vec::new();
        pack_i32(ENC_DEFAULT, 1000, &mut msg);
        msg.extend_from_slice(b"abcd");
        assert_eq!(unpack_str(ENC_DEFAULT, &msg, &mut 0), Err(PvmError::BadMsg));
        let mut msg = Vec::new();
        pack_i32(ENC_DEFAULT, -5, &mut msg);
        assert_eq!(unpack_str(ENC_DEFAULT, &msg, &mut 0), Err(PvmError::BadMsg));
    }
}
