# frozen_string_literal: true

require "json"

module Lockyard
  module GCS
    # The gem's +cloud_storage_options+ (the keywords of
    # +Google::Cloud::Storage.new+) and +cloud_storage_bucket_options+ (of
    # +Project#bucket+) as the core's options. Every key google-cloud-storage
    # takes is mapped, accepted and ignored for the reason given below, or
    # rejected by name with what to pass instead: a key silently dropped
    # would change what the user asked for.
    # @api private
    module StorageOptions
      # Keys accepted and ignored, and why.
      IGNORED = {
        # Object requests name the bucket, not the project; a requester-pays
        # bucket's billing project is cloud_storage_bucket_options' user_project.
        project_id: nil, project: nil,
        # The core retries 429, 5xx and connection failures with backoff until
        # the call's own deadline (the wait's timeout, the lease for refreshes
        # and releases): a fixed count or total time would give up on a lock
        # that can still be kept.
        retries: Integer, max_elapsed_time: Numeric, base_interval: Numeric,
        max_interval: Numeric, multiplier: Numeric,
        # The lock object is empty: nothing is ever uploaded in chunks.
        upload_chunk_size: Integer
      }.freeze

      # The scopes that allow what the lock does; it asks for
      # devstorage.read_write, which is no more than any of them.
      WRITABLE_SCOPES = %w[
        https://www.googleapis.com/auth/cloud-platform
        https://www.googleapis.com/auth/devstorage.full_control
        https://www.googleapis.com/auth/devstorage.read_write
      ].freeze

      # The longest of these is the request timeout when +timeout+ is absent
      # (the core has one limit per request, covering every phase).
      PHASE_TIMEOUTS = %i[open_timeout read_timeout send_timeout].freeze

      class << self
        # @return [Hash] the core's options
        # @raise [Lockyard::ConfigError]
        def translate(storage, bucket)
          storage_options(hash("cloud_storage_options", storage))
            .merge(bucket_options(hash("cloud_storage_bucket_options", bucket)))
        end

        private

        def hash(name, given)
          return {} if given.nil?
          raise ConfigError, "#{name} must be a Hash, not #{given.class}" unless given.is_a?(Hash)

          given.transform_keys do |key|
            next key.to_sym if key.is_a?(String) || key.is_a?(Symbol)

            raise ConfigError, "#{name}: keys are option names (Symbols or Strings), not #{key.inspect}"
          end
        end

        def storage_options(given)
          options = {}
          given.each do |key, value|
            # nil is Google::Cloud::Storage.new's default for every key: as if left out.
            next if value.nil?

            case key
            when :credentials, :keyfile then options.merge!(credentials(key, value))
            when :emulator_host, :endpoint then options[key] = value
            when :timeout then options[:request_timeout] = value
            when *PHASE_TIMEOUTS then check_type(key, value, Numeric)
            when :scope then check_scope(value)
            when :universe_domain then check_universe(value)
            when *IGNORED.keys then check_type(key, value, IGNORED[key])
            else
              raise ConfigError, "cloud_storage_options: #{key.inspect} is not an option of " \
                                 "Google::Cloud::Storage.new"
            end
          end
          phases = given.values_at(*PHASE_TIMEOUTS).compact
          options[:request_timeout] ||= phases.max if phases.any?
          options
        end

        def bucket_options(given)
          given.each_with_object({}) do |(key, value), options|
            next if value.nil? # Project#bucket's default, as if left out

            case key
            when :user_project
              options[:user_project] = user_project(value)
            # The gem passes skip_lookup: true itself, and Project#bucket
            # ignores the preconditions when it skips the lookup.
            when :skip_lookup, :if_metageneration_match, :if_metageneration_not_match then nil
            when :generation, :soft_deleted
              raise ConfigError, "cloud_storage_bucket_options: #{key.inspect} names a soft-deleted " \
                                 "bucket, which cannot hold a lock; leave it out"
            else
              raise ConfigError, "cloud_storage_bucket_options: #{key.inspect} is not an option of " \
                                 "Google::Cloud::Storage::Project#bucket"
            end
          end
        end

        # A key file's path, its JSON as a Hash, or a
        # Google::Auth::Credentials whose key can be read back.
        def credentials(key, value)
          case value
          when String then { credentials_file: value }
          when Hash then { credentials_json: JSON.generate(value) }
          else { credentials_json: JSON.generate(credentials_json(key, value)) }
          end
        end

        # The key file a Google::Auth::Credentials was made from, rebuilt
        # from its Signet client: a service account's email and private key,
        # or a user's OAuth client and refresh token.
        def credentials_json(key, value)
          client = value.respond_to?(:client) ? value.client : value
          if filled?(client, :issuer, :signing_key)
            signing_key = client.signing_key
            { "type" => "service_account", "client_email" => client.issuer,
              "private_key" => signing_key.respond_to?(:to_pem) ? signing_key.to_pem : signing_key.to_s }
          elsif filled?(client, :client_id, :client_secret, :refresh_token)
            { "type" => "authorized_user", "client_id" => client.client_id,
              "client_secret" => client.client_secret, "refresh_token" => client.refresh_token }
          else
            raise ConfigError, "cloud_storage_options: #{key}: cannot read a service account key or " \
                               "a refresh token out of a #{value.class}; pass the credentials file's " \
                               "path or its JSON as a Hash, or leave #{key} out to use Application " \
                               "Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's, the " \
                               "metadata server)"
          end
        end

        def filled?(client, *readers)
          readers.all? { |reader| client.respond_to?(reader) && !client.public_send(reader).to_s.empty? }
        end

        def check_scope(scope)
          scopes = Array(scope).map(&:to_s)
          return if scopes.intersect?(WRITABLE_SCOPES)

          raise ConfigError, "cloud_storage_options: scope #{scope.inspect} does not allow writing the " \
                             "lock object; give one of #{WRITABLE_SCOPES.join(', ')} or leave scope out"
        end

        def check_universe(domain)
          return if domain.to_s == "googleapis.com"

          raise ConfigError, "cloud_storage_options: universe_domain #{domain.inspect}: pass the " \
                             "universe's Cloud Storage URL as endpoint instead"
        end

        def check_type(key, value, type)
          return if type.nil? || value.nil? || (value.is_a?(type) && (!value.is_a?(Numeric) || value >= 0))

          raise ConfigError, "cloud_storage_options: #{key} must be a non-negative #{type}, not #{value.inspect}"
        end

        # true: the gem's "the project of the client" — which lockyard does
        # not know (project_id is ignored), so it must be named.
        def user_project(value)
          return value if value.is_a?(String) && !value.empty?

          raise ConfigError, "cloud_storage_bucket_options: user_project must be the billing project's " \
                             "id (a String), not #{value.inspect}"
        end
      end
    end
  end
end
