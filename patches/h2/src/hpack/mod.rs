mod decoder;
mod encoder;
pub(crate) mod header;
pub(crate) mod huffman;
mod table;

#[cfg(test)]
mod test;

pub use self::decoder::{Decoder, DecoderError, NeedMore};
pub use self::encoder::Encoder;
pub(crate) use self::encoder::encode_field;
pub(crate) use self::table::index_static_field;
pub use self::header::{BytesStr, Header};
