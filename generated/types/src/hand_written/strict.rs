//! A deserializer adapter that makes serde as strict as the schemas.
//!
//! Two of serde's leniencies let a document through that its schema refuses:
//! - derived struct deserializers also accept a sequence (the fields by position), so `[]`
//!   would read as a struct whose fields all have defaults, where the schema says `object`;
//! - an `Option` field reads `null` as absent, where the schema makes the property optional
//!   but not nullable.
//!
//! Wrapping the deserializer at every depth closes both: `deserialize_struct` asks for a map,
//! and the properties the generated table `struct_rules` of the document's schema set
//! ([`SchemaSet`], a type parameter of every adapter, so each lookup is a static call) names
//! refuse `null`. The typed parse
//! then accepts exactly what the schema does (the property tests check it), with two
//! adjustments the schemas call for:
//!
//! - **Unknown fields.** The generated structs do not carry `deny_unknown_fields`: serde skips
//!   a key it does not know with `deserialize_ignored_any`, and where the struct's schema is
//!   closed (`additionalProperties: false`, the table's `closed`) this adapter counts it. The
//!   count is the only cost on the fast path; [`crate::read`] then asks the schema validator
//!   where the unknown fields were, only when there were some (see README "Unknown fields").
//! - **Integers spelled as floats.** JSON Schema counts `1.0`, `-0` and `1e2` as integers; where
//!   the type asks for an integer, an integral float is handed on as that integer, so the
//!   integer type's own range check applies (`1.5` and `1e40` are still refused).

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

use std::marker::PhantomData;

use crate::schema_set::{SchemaSet, StructRules};

/// Deserializes a `T` of the schema set `S` from `bytes` as strictly as its schema: structs
/// from objects only, and a key that a closed object's schema does not define is an error (see
/// [`from_slice_lenient`] for the reader that sets such keys aside).
pub fn from_slice<'de, S: SchemaSet, T: de::Deserialize<'de>>(
    bytes: &'de [u8],
) -> serde_json::Result<T> {
    let (value, unknown) = from_slice_lenient::<S, T>(bytes)?;
    if unknown > 0 {
        return Err(<serde_json::Error as de::Error>::custom(format!(
            "{unknown} field(s) the schema does not define (additionalProperties)"
        )));
    }
    Ok(value)
}

/// Deserializes a `T` from `bytes` like [`from_slice`], except that keys a closed object's
/// schema does not define are skipped: the value is what the schema knows, and the count says
/// how many keys were set aside (their pointers come from the schema validator, see
/// [`crate::read`]).
pub fn from_slice_lenient<'de, S: SchemaSet, T: de::Deserialize<'de>>(
    bytes: &'de [u8],
) -> serde_json::Result<(T, u32)> {
    // Checking the whole body as UTF-8 once is cheaper than serde_json's check of every string
    // read from a byte slice; a body that is not UTF-8 is read from the slice so that the error
    // says where.
    match std::str::from_utf8(bytes) {
        Ok(text) => from_read::<S, _, T>(serde_json::de::StrRead::new(text)),
        Err(_) => from_read::<S, _, T>(serde_json::de::SliceRead::new(bytes)),
    }
}

/// Deserializes a `T` from an already-parsed value with the same rules as
/// [`from_slice_lenient`].
pub fn from_value_lenient<'de, S: SchemaSet, T: de::Deserialize<'de>>(
    value: &'de serde_json::Value,
) -> serde_json::Result<(T, u32)> {
    UNKNOWN.with(|n| n.set(0));
    let typed = T::deserialize(Strict::<_, S>::new(value))?;
    Ok((typed, UNKNOWN.with(|n| n.get())))
}

fn from_read<'de, S: SchemaSet, R: serde_json::de::Read<'de>, T: de::Deserialize<'de>>(
    read: R,
) -> serde_json::Result<(T, u32)> {
    UNKNOWN.with(|n| n.set(0));
    let mut de = serde_json::Deserializer::new(read);
    let value = T::deserialize(Strict::<_, S>::new(&mut de))?;
    de.end()?;
    Ok((value, UNKNOWN.with(|n| n.get())))
}

thread_local! {
    /// Keys of closed objects set aside by the parse running on this thread. A counter rather
    /// than state threaded through every adapter: the fast path pays one reset and one read per
    /// document, and nothing per key.
    static UNKNOWN: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

macro_rules! pass {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.0.$method(v)
            }
        )*
    };
}

/// The adapter around any deserializer, for the documents of the schema set `S`.
pub struct Strict<D, S> {
    de: D,
    set: PhantomData<fn() -> S>,
    /// The value is an optional property the schema does not let be `null`: `null` is refused
    /// instead of read as absent. Only this value: what it contains is read with a fresh
    /// adapter.
    refuse_null: bool,
    /// The value is a property of a closed object: when the struct skips it (serde's
    /// `deserialize_ignored_any` for a key it does not know), it is an unknown field.
    closed_member: bool,
}

impl<D, S: SchemaSet> Strict<D, S> {
    pub fn new(de: D) -> Strict<D, S> {
        Strict {
            de,
            set: PhantomData,
            refuse_null: false,
            closed_member: false,
        }
    }
}

/// Hands an integral float on as an integer where the type asks for one (JSON Schema's
/// `integer` includes `1.0`, `-0` and `1e2`); the integer visitor then checks its own range.
struct Integral<V>(V);

/// 2^64 and -2^63 as floats: the integral floats in [-2^63, 2^64) convert exactly.
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
const MINUS_TWO_POW_63: f64 = -9_223_372_036_854_775_808.0;

impl<'de, V: Visitor<'de>> Visitor<'de> for Integral<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.expecting(f)
    }

    pass!(
        visit_bool: bool, visit_i8: i8, visit_i16: i16, visit_i32: i32, visit_i64: i64,
        visit_i128: i128, visit_u8: u8, visit_u16: u16, visit_u32: u32, visit_u64: u64,
        visit_u128: u128, visit_str: &str, visit_borrowed_str: &'de str, visit_string: String,
    );

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        // `fract` of an infinity or NaN is NaN, so those stay floats.
        if v.fract() == 0.0 {
            if (0.0..TWO_POW_64).contains(&v) {
                // -0.0 lands here too: it is the integer 0.
                return self.0.visit_u64(v as u64);
            }
            if (MINUS_TWO_POW_63..0.0).contains(&v) {
                return self.0.visit_i64(v as i64);
            }
        }
        self.0.visit_f64(v)
    }

    fn visit_f32<E: de::Error>(self, v: f32) -> Result<V::Value, E> {
        self.visit_f64(f64::from(v))
    }
}

/// Wraps the visitor so the accessors it is handed are wrapped too.
struct Wrap<V, S>(V, PhantomData<fn() -> S>);

/// `Wrap` of `inner`, for the schema set `S`.
fn wrap<V, S>(inner: V) -> Wrap<V, S> {
    Wrap(inner, PhantomData)
}

macro_rules! forward_integer {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.de.$method(Integral(visitor))
            }
        )*
    };
}

macro_rules! forward {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.de.$method(wrap::<_, S>(visitor))
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>, S: SchemaSet> Deserializer<'de> for Strict<D, S> {
    type Error = D::Error;

    forward_integer!(
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
    );

    forward!(
        deserialize_any,
        deserialize_bool,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
    );

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        if self.closed_member {
            UNKNOWN.with(|n| n.set(n.get().saturating_add(1)));
        }
        self.de.deserialize_ignored_any(wrap::<_, S>(visitor))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        if self.refuse_null {
            self.de
                .deserialize_option(wrap::<_, S>(NoNullVisitor(visitor)))
        } else {
            self.de.deserialize_option(wrap::<_, S>(visitor))
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_unit_struct(name, wrap::<_, S>(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_newtype_struct(name, wrap::<_, S>(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_tuple(len, wrap::<_, S>(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_tuple_struct(name, len, wrap::<_, S>(visitor))
    }

    /// A struct comes from a map, never from a sequence, and knows which of its optional
    /// properties may not be `null`.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let rules = S::struct_rules(name);
        self.de.deserialize_map(StructVisitor::<V, S> {
            visitor,
            rules,
            set: PhantomData,
        })
    }

    /// A string enum comes from a string only, never from `{"variant": null}`.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        if S::is_string_enum(name) {
            self.de.deserialize_str(StringEnum(visitor))
        } else {
            self.de
                .deserialize_enum(name, variants, wrap::<_, S>(visitor))
        }
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

impl<'de, V: Visitor<'de>, S: SchemaSet> Visitor<'de> for Wrap<V, S> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.expecting(f)
    }

    pass!(
        visit_bool: bool, visit_i8: i8, visit_i16: i16, visit_i32: i32, visit_i64: i64,
        visit_i128: i128, visit_u8: u8, visit_u16: u16, visit_u32: u32, visit_u64: u64,
        visit_u128: u128, visit_f32: f32, visit_f64: f64, visit_char: char, visit_str: &str,
        visit_borrowed_str: &'de str, visit_string: String, visit_bytes: &[u8],
        visit_borrowed_bytes: &'de [u8], visit_byte_buf: Vec<u8>,
    );

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(Strict::<_, S>::new(deserializer))
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_unit()
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.0
            .visit_newtype_struct(Strict::<_, S>::new(deserializer))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.0.visit_seq(wrap::<_, S>(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(wrap::<_, S>(map))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.0.visit_enum(wrap::<_, S>(data))
    }
}

/// Wraps a seed so the deserializer it is given is wrapped.
struct Seed<K, S>(K, PhantomData<fn() -> S>);

/// `Seed` of `inner`, for the schema set `S`.
fn wrap_seed<K, S>(inner: K) -> Seed<K, S> {
    Seed(inner, PhantomData)
}

impl<'de, K: DeserializeSeed<'de>, S: SchemaSet> DeserializeSeed<'de> for Seed<K, S> {
    type Value = K::Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<K::Value, D::Error> {
        self.0.deserialize(Strict::<_, S>::new(deserializer))
    }
}

impl<'de, A: SeqAccess<'de>, S: SchemaSet> SeqAccess<'de> for Wrap<A, S> {
    type Error = A::Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(wrap_seed::<_, S>(seed))
    }
    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: MapAccess<'de>, S: SchemaSet> MapAccess<'de> for Wrap<A, S> {
    type Error = A::Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(wrap_seed::<_, S>(seed))
    }
    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.0.next_value_seed(wrap_seed::<_, S>(seed))
    }
    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>, S: SchemaSet> EnumAccess<'de> for Wrap<A, S> {
    type Error = A::Error;
    type Variant = Wrap<A::Variant, S>;
    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        let (value, variant) = self.0.variant_seed(wrap_seed::<_, S>(seed))?;
        Ok((value, wrap::<_, S>(variant)))
    }
}

impl<'de, A: VariantAccess<'de>, S: SchemaSet> VariantAccess<'de> for Wrap<A, S> {
    type Error = A::Error;
    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(wrap_seed::<_, S>(seed))
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, wrap::<_, S>(visitor))
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        // A struct variant's body is an object too.
        self.0
            .newtype_variant_seed(StructBody::<V, S>(visitor, PhantomData))
    }
}

/// Reads a struct variant's body through a map.
struct StructBody<V, S>(V, PhantomData<fn() -> S>);

impl<'de, V: Visitor<'de>, S: SchemaSet> DeserializeSeed<'de> for StructBody<V, S> {
    type Value = V::Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        deserializer.deserialize_map(wrap::<_, S>(self.0))
    }
}

/// The visitor of a struct body: hands the struct's visitor a map that checks `null`s.
struct StructVisitor<V, S> {
    visitor: V,
    rules: StructRules,
    set: PhantomData<fn() -> S>,
}

impl<'de, V: Visitor<'de>, S: SchemaSet> Visitor<'de> for StructVisitor<V, S> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(StructMap::<A, S> {
            map,
            set: PhantomData,
            non_null: self.rules.non_null,
            closed: self.rules.closed,
            value_non_null: false,
        })
    }
}

/// A struct's map: remembers whether the key just read names a property that may not be null.
struct StructMap<A, S> {
    map: A,
    set: PhantomData<fn() -> S>,
    non_null: &'static [&'static str],
    closed: bool,
    value_non_null: bool,
}

impl<'de, A: MapAccess<'de>, S: SchemaSet> MapAccess<'de> for StructMap<A, S> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        if self.non_null.is_empty() {
            return self.map.next_key_seed(wrap_seed::<_, S>(seed));
        }
        let mut is_non_null = false;
        let key = self.map.next_key_seed(KeySeed {
            seed,
            non_null: self.non_null,
            found: &mut is_non_null,
        })?;
        self.value_non_null = is_non_null;
        Ok(key)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.map.next_value_seed(MemberSeed::<_, S> {
            seed,
            set: PhantomData,
            refuse_null: std::mem::take(&mut self.value_non_null),
            closed_member: self.closed,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// Reads a key, noting whether it is one of `non_null`.
struct KeySeed<'a, K> {
    seed: K,
    non_null: &'static [&'static str],
    found: &'a mut bool,
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<'_, K> {
    type Value = K::Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<K::Value, D::Error> {
        self.seed.deserialize(KeyDeserializer {
            inner: deserializer,
            non_null: self.non_null,
            found: self.found,
        })
    }
}

struct KeyDeserializer<'a, D> {
    inner: D,
    non_null: &'static [&'static str],
    found: &'a mut bool,
}

macro_rules! forward_key {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.inner.$method(KeyVisitor { visitor, non_null: self.non_null, found: self.found })
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for KeyDeserializer<'_, D> {
    type Error = D::Error;

    forward_key!(
        deserialize_any,
        deserialize_str,
        deserialize_string,
        deserialize_identifier,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_ignored_any,
    );

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char option unit unit_struct
        newtype_struct seq tuple tuple_struct map struct enum
    }
}

struct KeyVisitor<'a, V> {
    visitor: V,
    non_null: &'static [&'static str],
    found: &'a mut bool,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for KeyVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        *self.found = self.non_null.contains(&v);
        self.visitor.visit_str(v)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        *self.found = self.non_null.contains(&v);
        self.visitor.visit_borrowed_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        *self.found = self.non_null.contains(&v.as_str());
        self.visitor.visit_string(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.visitor.visit_u64(v)
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<V::Value, E> {
        self.visitor.visit_bytes(v)
    }
}

/// The value of a struct's property: it may be one that may not be `null`, and it may belong
/// to a closed object.
struct MemberSeed<K, S> {
    seed: K,
    set: PhantomData<fn() -> S>,
    refuse_null: bool,
    closed_member: bool,
}

impl<'de, K: DeserializeSeed<'de>, S: SchemaSet> DeserializeSeed<'de> for MemberSeed<K, S> {
    type Value = K::Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<K::Value, D::Error> {
        self.seed.deserialize(Strict::<D, S> {
            de: deserializer,
            set: PhantomData,
            refuse_null: self.refuse_null,
            closed_member: self.closed_member,
        })
    }
}

struct NoNullVisitor<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for NoNullVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.expecting(f)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        Err(E::custom(
            "null is not allowed here: leave the property out instead",
        ))
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        Err(E::custom(
            "null is not allowed here: leave the property out instead",
        ))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(deserializer)
    }
}

/// Reads a string enum's value from a string and hands it on as a unit variant.
struct StringEnum<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for StringEnum<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.expecting(f)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.0
            .visit_enum(de::IntoDeserializer::<E>::into_deserializer(v))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        self.0
            .visit_enum(de::value::BorrowedStrDeserializer::<E>::new(v))
    }
}
