//! Looking at a store without writing to it.
