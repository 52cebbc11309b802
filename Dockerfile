# Builds the postback binary and runs it on a slim Debian.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY lua lua
COPY config config
COPY ui ui
RUN cargo build --release --locked --bin postback

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/postback /usr/local/bin/postback
COPY config/postback.toml /etc/postback/postback.toml
# Without a Redis URL, notifications are kept in the embedded store here: mount a volume.
RUN mkdir -p /var/lib/postback && chown nobody /var/lib/postback
VOLUME /var/lib/postback
ENV POSTBACK_SERVER_LISTEN=0.0.0.0:8080 POSTBACK_STORE_DATA_DIR=/var/lib/postback
EXPOSE 8080
USER nobody
ENTRYPOINT ["postback"]
CMD ["serve", "--config", "/etc/postback/postback.toml"]
