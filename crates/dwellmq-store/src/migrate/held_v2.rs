//! Format 2 to 3: `held` (`u32 number ‖ u64 due_ms ‖ u64 seq` → `u64 body octets ‖ packed
//! message`) becomes `held_messages` keyed by seq with format 3's 21-octet header, and
//! `held_due` with one format-3 entry per hold (key `u32 number ‖ u64 bucket start ‖ u8 shift
//! ‖ u64 seq`, value the `u32` due offset in the bucket). Exchange numbers and their
//! `delayed_exchanges` rows stay as they are.

use dwellmq_core::PackedMessage;
use redb::{ReadableTable, WriteTransaction};

use super::{be_u64, table_exists, StepError, StepResult, HELD_V2};
use crate::layout::{bucket_shift, bucket_start, held_due_key, HELD_DUE, HELD_MESSAGES};
use crate::records::{HeldHeader, HELD_HEADER};

/// Splits every `held` record; returns how many.
pub(crate) fn to_format3(tx: &WriteTransaction, now_ms: u64) -> StepResult<u64> {
    if !table_exists(tx, HELD_V2)? {
        return Ok(0);
    }
    let mut split = 0;
    {
        let held = tx.open_table(HELD_V2)?;
        let mut messages = tx.open_table(HELD_MESSAGES)?;
        let mut due = tx.open_table(HELD_DUE)?;
        for entry in held.iter()? {
            let (key, value) = entry?;
            let (key, value) = (key.value(), value.value());
            let corrupt = || StepError::Corrupt("held", key.to_vec());
            let (number, due_ms, seq) = split_key(key).ok_or_else(corrupt)?;
            let body_octets = be_u64(value).ok_or_else(corrupt)?;
            let packed = &value[8..];
            PackedMessage::body_len_of(packed).ok_or_else(corrupt)?;
            let shift = bucket_shift(now_ms, due_ms);
            let mut record = vec![0u8; HELD_HEADER + packed.len()];
            HeldHeader {
                exchange: number,
                shift,
                exchange_elided: false,
                due_ms,
                body_octets,
            }
            .write(&mut record[..HELD_HEADER]);
            record[HELD_HEADER..].copy_from_slice(packed);
            let seq_key = seq.to_be_bytes();
            if messages.insert(&seq_key[..], &record[..])?.is_some() {
                return Err(StepError::Corrupt("held_messages", seq_key.to_vec()));
            }
            let start = bucket_start(due_ms, shift);
            let offset = ((due_ms - start) as u32).to_be_bytes();
            due.insert(&held_due_key(number, start, shift, seq)[..], &offset[..])?;
            split += 1;
        }
    }
    tx.delete_table(HELD_V2)?;
    Ok(split)
}

/// (number, due ms, seq) of a `held` key.
pub(crate) fn split_key(key: &[u8]) -> Option<(u32, u64, u64)> {
    if key.len() != 20 {
        return None;
    }
    let number = u32::from_be_bytes(key[..4].try_into().ok()?);
    Some((number, be_u64(&key[4..])?, be_u64(&key[12..])?))
}
