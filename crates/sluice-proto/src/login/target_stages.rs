//! The per-stage handlers of [`TargetLogin`](super::TargetLogin): identity keys, the security
//! stage (AuthMethod and CHAP, RFC 7143 section 12) and the operational stage (section 6.3).

use super::*;

type Pairs = Vec<(String, String)>;

fn is_security_key(key: &str) -> bool {
    keys::lookup(key).is_some_and(|d| d.phase == Phase::Security)
}

fn is_identity_key(key: &str) -> bool {
    keys::lookup(key).is_some_and(|d| d.handler == Handler::Login && d.phase != Phase::Security)
}

/// The pairs the negotiator handles (operational, unknown and extension keys).
fn operational_pairs(pairs: &[(String, String)]) -> Pairs {
    pairs
        .iter()
        .filter(|(k, _)| !is_security_key(k) && !is_identity_key(k))
        .cloned()
        .collect()
}

impl Session {
    /// Identity keys: accepted in the first request only (RFC 7143 section 6.3: redeclaring is
    /// an initiator error); the first response carries TargetPortalGroupTag and TargetAlias.
    pub(super) fn identity_extras(
        &mut self,
        _req: &LoginRequest,
        pairs: &[(String, String)],
        out: &mut Pairs,
    ) -> Result<(), LoginStatus> {
        if self.first_response_sent {
            let redeclared = |k: &str| {
                keys::lookup(k).is_some_and(|d| {
                    matches!(
                        d.id,
                        KeyId::InitiatorName | KeyId::TargetName | KeyId::SessionType
                    )
                })
            };
            if pairs.iter().any(|(k, _)| redeclared(k)) {
                return Err(LoginStatus::INITIATOR_ERROR);
            }
            return Ok(());
        }
        self.first_response_sent = true;
        self.initiator_alias = KeyId::InitiatorAlias.find_in(pairs).map(str::to_owned);
        if self.binding.target_name.is_some() {
            // Section 13.9: "The iSCSI target returns this key to the initiator in the Login
            // Response PDU to the first Login Request PDU that has the C bit set to 0 when
            // TargetName is given by the initiator."
            let tag = self.policy.portal_group_tag.to_string();
            out.push(KeyId::TargetPortalGroupTag.pair(tag));
            if let Some(alias) = &self.policy.alias {
                out.push(KeyId::TargetAlias.pair(alias.clone()));
            }
        }
        Ok(())
    }

    /// The security stage. Returns whether the target may set T (authentication complete).
    pub(super) fn security(
        &mut self,
        pairs: &[(String, String)],
        env: &mut dyn TargetLoginEnv,
        out: &mut Pairs,
    ) -> Result<bool, LoginStatus> {
        let answers = self
            .negotiator
            .handle(&operational_pairs(pairs))
            .map_err(|_| LoginStatus::INITIATOR_ERROR)?;
        let mut progressed = false;
        if matches!(self.security, Security::ExpectAuthMethod) {
            progressed = true;
            self.auth_method(KeyId::AuthMethod.find_in(pairs), out)?;
        }
        if matches!(self.security, Security::ExpectChapA) {
            match KeyId::ChapA.find_in(pairs) {
                Some(list) => {
                    let chap = self.policy.chap.as_ref().ok_or(LoginStatus::AUTH_FAILURE)?;
                    // Section 12.1.3: the target answers with the first CHAP_A value of the
                    // initiator's list that it supports.
                    let alg = select_algorithm(list, &chap.algorithms)
                        .map_err(|_| LoginStatus::AUTH_FAILURE)?;
                    let mut random = |buf: &mut [u8]| env.random_bytes(buf);
                    let challenge = ChapChallenge::issue(alg, chap.challenge_len, &mut random);
                    out.extend(challenge.to_pairs());
                    self.security = Security::ExpectChapResponse(challenge);
                    return Ok(false);
                }
                None if progressed => {}
                None => return Err(LoginStatus::MISSING_PARAMETER),
            }
        } else if let Security::ExpectChapResponse(challenge) = &self.security {
            let challenge = challenge.clone();
            self.chap_response(&challenge, pairs, out)?;
            self.security = Security::Authenticated;
        } else if !progressed && pairs.iter().any(|(k, _)| is_security_key(k)) {
            // Security keys after authentication completed: a renegotiation (section 6.2).
            return Err(LoginStatus::INITIATOR_ERROR);
        }
        out.extend(answers);
        Ok(matches!(self.security, Security::Authenticated))
    }

    /// Section 12.1: the target chooses the first AuthMethod of the initiator's list that it
    /// supports: CHAP when a secret is configured, None only when no authentication is needed.
    fn auth_method(&mut self, offered: Option<&str>, out: &mut Pairs) -> Result<(), LoginStatus> {
        let supported = if self.policy.chap.is_some() {
            "CHAP"
        } else {
            "None"
        };
        let Some(list) = offered else {
            // No AuthMethod: acceptable only when no authentication is required.
            if self.policy.chap.is_some() {
                return Err(LoginStatus::AUTH_FAILURE);
            }
            self.security = Security::Authenticated;
            return Ok(());
        };
        if !list.split(',').any(|m| m == supported) {
            return Err(LoginStatus::AUTH_FAILURE);
        }
        out.push(KeyId::AuthMethod.pair(supported));
        self.security = if self.policy.chap.is_some() {
            Security::ExpectChapA
        } else {
            Security::Authenticated
        };
        Ok(())
    }

    /// Verifies CHAP_N / CHAP_R and, for mutual CHAP, answers the initiator's CHAP_I / CHAP_C.
    fn chap_response(
        &mut self,
        challenge: &ChapChallenge,
        pairs: &[(String, String)],
        out: &mut Pairs,
    ) -> Result<(), LoginStatus> {
        let chap = self.policy.chap.as_ref().ok_or(LoginStatus::AUTH_FAILURE)?;
        let (Some(name), Some(response)) =
            (KeyId::ChapN.find_in(pairs), KeyId::ChapR.find_in(pairs))
        else {
            return Err(LoginStatus::MISSING_PARAMETER);
        };
        // Check the response before answering any challenge so that a failed initiator learns
        // nothing from us.
        let name_ok = name == chap.initiator.user;
        let response_ok = challenge.verify(&chap.initiator.secret, response);
        if !(name_ok & response_ok) {
            return Err(LoginStatus::AUTH_FAILURE);
        }
        self.authenticated_user = Some(name.to_owned());
        match (KeyId::ChapI.find_in(pairs), KeyId::ChapC.find_in(pairs)) {
            (None, None) => Ok(()),
            (Some(id), Some(their_challenge)) => {
                let mutual = chap.mutual.as_ref().ok_or(LoginStatus::AUTH_FAILURE)?;
                let id = parse_identifier(id).map_err(|_| LoginStatus::AUTH_FAILURE)?;
                let their_challenge =
                    decode_binary(their_challenge).map_err(|_| LoginStatus::AUTH_FAILURE)?;
                // Section 9.2.1: "Originators MUST NOT reuse the CHAP challenge sent by the
                // Responder for the other direction of a bidirectional authentication.
                // Responders MUST check for this condition and close the iSCSI TCP connection
                // if it occurs."
                if their_challenge == challenge.challenge {
                    return Err(LoginStatus::AUTH_FAILURE);
                }
                // Section 9.2.1: "Any CHAP secret used for initiator authentication MUST NOT
                // be configured for authentication of any target".
                if mutual.secret == chap.initiator.secret {
                    return Err(LoginStatus::AUTH_FAILURE);
                }
                let r = challenge
                    .algorithm
                    .response(id, &mutual.secret, &their_challenge);
                out.push(KeyId::ChapN.pair(mutual.user.clone()));
                out.push(KeyId::ChapR.pair(encode_hex(&r)));
                Ok(())
            }
            _ => Err(LoginStatus::MISSING_PARAMETER),
        }
    }

    /// The operational stage. Returns whether the target may set T.
    pub(super) fn operational(
        &mut self,
        pairs: &[(String, String)],
        transit_requested: bool,
        out: &mut Pairs,
    ) -> Result<bool, LoginStatus> {
        // Section 12: security keys belong to the security stage only.
        if pairs.iter().any(|(k, _)| is_security_key(k)) {
            return Err(LoginStatus::INITIATOR_ERROR);
        }
        let answers = self
            .negotiator
            .handle(&operational_pairs(pairs))
            .map_err(|_| LoginStatus::INITIATOR_ERROR)?;
        out.extend(answers);
        if !self.operational_started {
            self.operational_started = true;
            // Section 13.12: each side declares its own MaxRecvDataSegmentLength.
            out.extend(self.negotiator.declarations());
        }
        if transit_requested && !self.offers_made {
            self.offers_made = true;
            out.extend(self.negotiator.offers());
        }
        Ok(!self.negotiator.has_pending())
    }
}
